package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"perfinsp/analysis/callflow"
)

// parseSize parses --folded-max: a byte count, or a number followed by
// K, M or G (1024s; KiB, MiB, GiB too). 0 is no bound.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = t[:len(t)-len(u.suffix)], u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q: give a size in bytes such as 64M, 1G or 500000 (0: no bound)", s)
	}
	return v * mult, nil
}

// sizeName is n bytes in the largest unit that divides it.
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%s bytes", thousands(n))
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// percent is p with two significant digits below 1 (0.0012), one decimal
// above.
func percent(p float64) string {
	if p >= 1 || p <= 0 {
		return strconv.FormatFloat(p, 'f', 1, 64)
	}
	return strconv.FormatFloat(p, 'f', int(-math.Floor(math.Log10(p)))+1, 64)
}

// foldedNote is the line hookit report gives when the folded file is not
// the exact form (call paths counted in their callers), "" when it is.
func foldedNote(name string, fc callflow.FoldedCut, limit int64) string {
	if fc.Folded() == 0 {
		return ""
	}
	share := 0.0
	if fc.Total > 0 {
		share = 100 * float64(fc.Cut) / float64(fc.Total)
	}
	note := fmt.Sprintf("%s: %s of %s call paths (each at most %s %% of the total BASE) are counted in their callers",
		name, thousands(int64(fc.Folded())), thousands(int64(fc.Paths)), percent(share))
	if fc.Size > limit {
		note += fmt.Sprintf("; the threads' own lines alone take %s, over --folded-max %s", sizeName(fc.Size), sizeName(limit))
	} else {
		note += fmt.Sprintf(" to keep the file under %s (every path: %s)", sizeName(limit), sizeName(fc.Exact))
	}
	return note + "; --folded-max 0 writes every path"
}
