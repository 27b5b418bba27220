// Package cliutil holds what every perfinsp command shares on its command
// line: one version string (--version) and usage errors that take one line,
// name the nearest option or command, and point to --help.
package cliutil

import (
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// version is set by the build: go build -ldflags "-X perfinsp/internal/cliutil.version=V"
// (the Makefile passes git describe). Without it, Version reads the
// revision the go command stamped into the binary.
var version string

// Version is the build's version string, the same for every tool of one
// build: the -ldflags value, else the VCS revision go build recorded
// (12 digits, "-dirty" with uncommitted changes), else the module version.
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		return rev
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return "unknown (built without version information)"
}

// Apply gives app --version and one-line usage errors, for the app and
// every command under it. Commands that set their own OnUsageError keep it.
func Apply(app *cli.App) {
	app.ExitErrHandler = func(*cli.Context, error) {} // the caller turns errors into exit codes (Run)
	app.Version = Version()
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	cli.VersionPrinter = func(c *cli.Context) {
		fmt.Fprintf(c.App.Writer, "%s (perfinsp) %s\n", c.App.Name, c.App.Version)
	}
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		return UsageError(c, err.Error())
	}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			if cmd.OnUsageError == nil {
				cmd.OnUsageError = app.OnUsageError
			}
			addVersion(cmd)
			if cmd.Action == nil && len(cmd.Subcommands) > 0 {
				cmd.Action = subcommandMissing
			}
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
	app.CommandNotFound = func(c *cli.Context, name string) {
		var names []string
		for _, cmd := range c.App.Commands {
			if !cmd.Hidden {
				names = append(names, cmd.Names()...)
			}
		}
		msg := fmt.Sprintf("unknown command %q", name)
		if s := Nearest(name, names); s != "" {
			msg += fmt.Sprintf(": did you mean %s?", s)
		}
		fmt.Fprintf(c.App.ErrWriter, "%s: %s (%s --help for more)\n", c.App.Name, msg, c.App.Name)
		if c.App.Metadata == nil {
			c.App.Metadata = map[string]any{}
		}
		c.App.Metadata[notFoundKey] = true
	}
}

// addVersion gives cmd a --version option that prints the app's version
// and exits 0, as the app's own does (the CLI library answers it only
// before the first command). A command with its own --version keeps it.
func addVersion(cmd *cli.Command) {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == "version" {
				return
			}
		}
	}
	cmd.Flags = append(cmd.Flags, &cli.BoolFlag{Name: "version", Usage: "print the version and exit"})
	before := cmd.Before
	cmd.Before = func(c *cli.Context) error {
		if c.Bool("version") {
			cli.VersionPrinter(c)
			return cli.Exit("", 0)
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
}

// subcommandMissing is the action of a command that only holds
// subcommands (swtrace itrace on|off), reached when none of them was
// named: a usage error naming them (and the nearest to a misspelt one),
// not the command's help.
func subcommandMissing(c *cli.Context) error {
	var names []string
	for _, sub := range c.Command.Subcommands {
		if !sub.Hidden && sub.Name != "help" {
			names = append(names, sub.Name)
		}
	}
	list := strings.Join(names, ", ")
	if i := strings.LastIndex(list, ", "); i >= 0 {
		list = list[:i] + " or " + list[i+2:]
	}
	if !c.Args().Present() {
		return UsageError(c, "give a command: "+list)
	}
	name := c.Args().First()
	msg := fmt.Sprintf("unknown command %q", name)
	if s := Nearest(name, names); s != "" {
		msg += fmt.Sprintf(": did you mean %s?", s)
	} else {
		msg += ": use " + list
	}
	return UsageError(c, msg)
}

const (
	notFoundKey = "cliutil.commandNotFound"
	argsKey     = "cliutil.args"
)

// NotFound reports whether app's last Run met an unknown command (Run
// returns no error then: the caller exits 2).
func NotFound(app *cli.App) bool {
	b, _ := app.Metadata[notFoundKey].(bool)
	return b
}

// RunApp is app.Run(args), keeping args for the usage errors' spelling.
func RunApp(app *cli.App, args []string) error {
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[argsKey] = args
	delete(app.Metadata, notFoundKey)
	return app.Run(args)
}

// Run runs app and returns the exit code: 0; 2 for a usage error or an
// unknown command; an cli.ExitCoder's code, its message printed as
// "NAME: message"; 1 for another error, printed so.
func Run(app *cli.App, args []string) int {
	err := RunApp(app, args)
	var ec cli.ExitCoder
	switch {
	case NotFound(app):
		return 2
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			// Exit code 2 is a usage error: one line, pointing to --help.
			if ec.ExitCode() == 2 && !strings.Contains(msg, "--help") {
				msg += fmt.Sprintf(" (%s --help for more)", app.Name)
			}
			fmt.Fprintf(app.ErrWriter, "%s: %s\n", app.Name, msg)
		}
		return ec.ExitCode()
	case err != nil:
		fmt.Fprintf(app.ErrWriter, "%s: %s\n", app.Name, err)
		return 1
	}
	return 0
}

// UsageError prints msg as one line on c's error stream, with the nearest
// flag when msg is about an unknown one and a pointer to --help, and
// returns the exit error (code 2) for the caller to return.
func UsageError(c *cli.Context, msg string) error {
	name := commandPath(c)
	const undefined = "flag provided but not defined: "
	const noValue = "flag needs an argument: "
	switch {
	case strings.HasPrefix(msg, undefined):
		given := strings.TrimPrefix(msg, undefined)
		given = dashes(c, strings.TrimLeft(given, "-")) + strings.TrimLeft(given, "-")
		msg = "unknown option " + given
		if s := nearestFlag(c, given); s != "" {
			msg += ": did you mean " + s + "?"
		}
	case strings.HasPrefix(msg, noValue):
		bare := strings.TrimLeft(strings.TrimPrefix(msg, noValue), "-")
		msg = dashes(c, bare) + bare + " needs a value"
	default:
		if m := badValue.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("%s%s %s: %s", dashes(c, m[2]), m[2], m[1], valueProblem(c, m[2], m[3]))
		}
	}
	fmt.Fprintf(c.App.ErrWriter, "%s: %s (%s --help for more)\n", name, msg, name)
	return cli.Exit("", 2)
}

// badValue is the flag package's message for a value its flag cannot
// parse: `invalid value "abc" for flag -p: strconv.ParseInt: parsing
// "abc": invalid syntax`.
var badValue = regexp.MustCompile(`^invalid value ("(?:[^"\\]|\\.)*") for flag -+([^:]+): (.*)$`)

// valueProblem says what is wrong with the value of flag name (the flag
// package's err) in the user's terms, by the flag's type.
func valueProblem(c *cli.Context, name, err string) string {
	if strings.Contains(err, "value out of range") {
		return "out of range"
	}
	flags := c.App.Flags
	if c.Command != nil && len(c.Command.Flags) > 0 {
		flags = c.Command.Flags
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			switch f.(type) {
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag,
				*cli.IntSliceFlag, *cli.Int64SliceFlag, *cli.UintSliceFlag, *cli.Uint64SliceFlag:
				return "not a whole number"
			case *cli.Float64Flag, *cli.Float64SliceFlag:
				return "not a number"
			case *cli.DurationFlag:
				return "not a duration (such as 500ms, 2s or 1m)"
			}
		}
	}
	return err
}

// commandPath is "app command subcommand" of c.
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != c.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(append([]string{c.App.Name}, names...), " ")
}

// nearestFlag is the flag of c's command (or app) nearest to given, spelt
// with the same dashes as given.
func nearestFlag(c *cli.Context, given string) string {
	flags := c.App.Flags
	if c.Command != nil && len(c.Command.Flags) > 0 {
		flags = c.Command.Flags
	}
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	bare := strings.TrimLeft(given, "-")
	s := Nearest(bare, names)
	if s == "" {
		return ""
	}
	return dashes(c, bare) + s
}

// dashes is how the user wrote the option bare on the command line (the
// flag package's message always shows one dash).
func dashes(c *cli.Context, bare string) string {
	args, _ := c.App.Metadata[argsKey].([]string)
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(a, "=")
		if strings.TrimLeft(name, "-") == bare && strings.HasPrefix(name, "-") {
			return name[:len(name)-len(bare)]
		}
	}
	return "-"
}

// Nearest is the candidate closest to s by edit distance, if it is close
// enough to be a slip (at most a third of its length, at least 1) and
// unambiguous; else "".
func Nearest(s string, candidates []string) string {
	best, bestD, tie := "", -1, false
	for _, c := range candidates {
		d := distance(s, c)
		switch {
		case bestD < 0 || d < bestD:
			best, bestD, tie = c, d, false
		case d == bestD && c != best:
			tie = true
		}
	}
	// A slip keeps most of the word: within a third of its length, and
	// never all of it replaced (-x is no slip of -h).
	limit := min(max(1, len(s)/3), len(s)-1)
	if best == "" || bestD > limit || tie {
		return ""
	}
	return best
}

// Closest lists up to n candidates nearest to s: those holding s (or held
// in it) first, then by edit distance, at equal distance those holding
// s's letters in order (spn: spin before sh); only those within half of
// s's length (at least 2) of it.
func Closest(s string, candidates []string, n int) []string {
	type cand struct {
		name   string
		d      int
		spread bool // s's letters in order in name
	}
	var cs []cand
	ls := strings.ToLower(s)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := distance(ls, lc)
		if strings.Contains(lc, ls) || strings.Contains(ls, lc) {
			d = 0
		}
		if d <= max(2, len(s)/2) {
			cs = append(cs, cand{c, d, subsequence(ls, lc)})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].d != cs[j].d {
			return cs[i].d < cs[j].d
		}
		if cs[i].spread != cs[j].spread {
			return cs[i].spread
		}
		return cs[i].name < cs[j].name
	})
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

// subsequence says whether s's bytes appear in t in order.
func subsequence(s, t string) bool {
	for i := 0; i < len(t) && len(s) > 0; i++ {
		if t[i] == s[0] {
			s = s[1:]
		}
	}
	return s == ""
}

// distance is the edit distance of a and b (bytes): insertions, deletions,
// substitutions and transpositions of neighbours (--onyl is one slip from
// --only).
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// OptionsFirst splits the arguments after a command into its options
// (with the values of those valueFlags names) and its other arguments, so
// that a tool can pass them options first: the CLI library stops reading
// options at the first argument that is not one (`swtrace mode cont -f
// FILE`, `rtdriver flush -p PID`). A "--" ends the options: the rest
// then begins with a "--" of its own, so that the library takes nothing
// after the options for one (`swtrace hook 0x100 -- -5`).
func OptionsFirst(args []string, valueFlags map[string]bool) (opts, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(append([]string{"--"}, rest...), args[i+1:]...)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			opts = append(opts, a)
			if valueFlags[a] && i+1 < len(args) {
				i++
				opts = append(opts, args[i])
			}
		default:
			rest = append(rest, a)
		}
	}
	return opts, rest
}
