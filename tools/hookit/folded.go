package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"perfinsp/analysis/callflow"
	"perfinsp/internal/cliutil"
)

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
		note += fmt.Sprintf("; the threads' own lines alone take %s, over --folded-max %s", cliutil.SizeName(fc.Size), cliutil.SizeName(limit))
	} else {
		note += fmt.Sprintf(" to keep the file under %s (every path: %s)", cliutil.SizeName(limit), cliutil.SizeName(fc.Exact))
	}
	return note + "; --folded-max 0 writes every path"
}
