// Package pprofloc gives a pprof profile one function and one location per
// name, as the call-tree reports need them (ITrace stacks, call flows,
// merged trees): IDs in order of first use, no addresses or mappings; its
// Stream also writes locations at addresses of mappings, with source
// lines (the ITrace profile's). tprof's writer, which maps modules and
// addresses, keeps its own, and writes its profile with Write.
package pprofloc

import "github.com/google/pprof/profile"

// Table adds the functions and locations of one profile.
type Table struct {
	p    *profile.Profile
	locs map[string]*profile.Location
}

// New returns a table adding to p.
func New(p *profile.Profile) *Table {
	return &Table{p: p, locs: map[string]*profile.Location{}}
}

// Loc returns the location of key, named name (with its source file and
// first line when file is not ""), created the first time key is seen.
func (t *Table) Loc(key, name, file string, line int64) *profile.Location {
	if l := t.locs[key]; l != nil {
		return l
	}
	f := &profile.Function{ID: uint64(len(t.p.Function) + 1), Name: name, SystemName: name, Filename: file, StartLine: line}
	t.p.Function = append(t.p.Function, f)
	l := &profile.Location{ID: uint64(len(t.p.Location) + 1), Line: []profile.Line{{Function: f}}}
	t.p.Location = append(t.p.Location, l)
	t.locs[key] = l
	return l
}

// Named is Loc for a name that is its own key, with no source.
func (t *Table) Named(name string) *profile.Location {
	return t.Loc(name, name, "", 0)
}
