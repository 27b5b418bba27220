package otlptest

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Summary is what a set of requests says of the processes a filter chose.
type Summary struct {
	Total     int64            // samples
	Inclusive map[string]int64 // samples whose stack holds the function
	Leaf      map[string]int64 // samples whose innermost frame is the function
	Resources []map[string]any // the chosen processes' resource attributes, one per profile
	Profiles  int
	Threads   map[int64]string // thread.id -> thread.name seen
	Stacks    [][]string       // one stack per sample entry, leaf first
}

// Summarize adds up the CPU samples (the profiles of sample type
// "samples") of the resources keep chooses.
func Summarize(ps []pprofile.Profiles, keep func(attrs pcommon.Map) bool) Summary {
	return SummarizeType(ps, "samples", keep)
}

// SummarizeType adds up the sample values of the profiles of sample type
// typ (such as "off_cpu", nanoseconds) of the resources keep chooses.
func SummarizeType(ps []pprofile.Profiles, typ string, keep func(attrs pcommon.Map) bool) Summary {
	s := Summary{Inclusive: map[string]int64{}, Leaf: map[string]int64{}, Threads: map[int64]string{}}
	for _, p := range ps {
		d := p.Dictionary()
		strs := d.StringTable()
		str := func(i int32) string {
			if i < 0 || int(i) >= strs.Len() {
				return ""
			}
			return strs.At(int(i))
		}
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			rp := p.ResourceProfiles().At(i)
			if !keep(rp.Resource().Attributes()) {
				continue
			}
			for j := 0; j < rp.ScopeProfiles().Len(); j++ {
				profs := rp.ScopeProfiles().At(j).Profiles()
				for k := 0; k < profs.Len(); k++ {
					prof := profs.At(k)
					if str(prof.SampleType().TypeStrindex()) != typ {
						continue
					}
					s.Profiles++
					s.Resources = append(s.Resources, rp.Resource().Attributes().AsRaw())
					for n := 0; n < prof.Samples().Len(); n++ {
						smp := prof.Samples().At(n)
						var v int64
						for x := 0; x < smp.Values().Len(); x++ {
							v += smp.Values().At(x)
						}
						s.Total += v
						var tid int64
						var tname string
						for x := 0; x < smp.AttributeIndices().Len(); x++ {
							kv := d.AttributeTable().At(int(smp.AttributeIndices().At(x)))
							switch str(kv.KeyStrindex()) {
							case "thread.id":
								tid = kv.Value().Int()
							case "thread.name":
								tname = kv.Value().Str()
							}
						}
						s.Threads[tid] = tname
						st := d.StackTable().At(int(smp.StackIndex()))
						seen := map[string]bool{}
						var names []string
						for x := 0; x < st.LocationIndices().Len(); x++ {
							loc := d.LocationTable().At(int(st.LocationIndices().At(x)))
							for y := 0; y < loc.Lines().Len(); y++ {
								fn := d.FunctionTable().At(int(loc.Lines().At(y).FunctionIndex()))
								name := str(fn.NameStrindex())
								names = append(names, name)
								if !seen[name] {
									seen[name] = true
									s.Inclusive[name] += v
								}
							}
						}
						if len(names) > 0 {
							s.Leaf[names[0]] += v
						}
						s.Stacks = append(s.Stacks, names)
					}
				}
			}
		}
	}
	return s
}

// Share is n as a percentage of the total (0 without samples).
func (s Summary) Share(n int64) float64 {
	if s.Total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(s.Total)
}
