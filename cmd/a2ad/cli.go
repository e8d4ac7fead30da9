package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/a2ad/a2ad/internal/version"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses of a2ad (docs/operations.md "CLI conventions").
const (
	exitOK      = 0
	exitRuntime = 1 // the command ran and failed: a2ad unreachable, a refusal, a file not written
	exitUsage   = 2 // the command line is wrong: unknown command or flag, bad flag value, wrong argument count
)

// cliError is an error with the stable code `--json` prints
// ({"error":{"code":…,"message":…}}) and the exit status it gives.
type cliError struct {
	code string // snake_case: usage, unreachable, unauthorized, not_found, …, or the admin API's own code
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

// usageError is a wrong command line: exit status 2, code "usage".
func usageError(format string, a ...any) error {
	return &cliError{code: "usage", err: fmt.Errorf(format, a...)}
}

// codedError gives err the --json code code (exit status 1).
func codedError(code string, err error) error {
	return &cliError{code: code, err: err}
}

// errorCode is the --json code of err and its exit status: a cliError's
// code; cobra's own refusals of a command line (a required flag missing,
// an unknown command) are usage errors; anything else is "internal"
// with exit status 1.
func errorCode(err error) (string, int) {
	var ce *cliError
	if errors.As(err, &ce) {
		if ce.code == "usage" {
			return ce.code, exitUsage
		}
		return ce.code, exitRuntime
	}
	msg := err.Error()
	for _, p := range []string{"unknown command ", "required flag(s) ", "if any flags in the group ", "at least one of the flags in the group "} {
		if strings.HasPrefix(msg, p) {
			return "usage", exitUsage
		}
	}
	return "internal", exitRuntime
}

// configureRoot makes root follow the CLI conventions: --version and
// `version`, flag and argument faults as usage errors (exit 2), `a2ad
// GROUP unknown` refused rather than answered with help, and errors
// printed by run (plain on stderr, or as JSON on stdout with --json).
func configureRoot(root *cobra.Command) {
	root.Version = version.Get().Version
	root.SetVersionTemplate(version.Get().String() + "\n")
	root.SilenceErrors = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &cliError{code: "usage", err: flagError(err)}
	})
	root.AddCommand(newVersion())
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Args != nil {
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &cliError{code: "usage", err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
				}
				return nil
			}
		}
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil && c.HasParent() {
			// A group (tasks, agents, token): with no subcommand it shows
			// its help; an unknown one is a usage error, not help and 0.
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, a []string) error {
				if len(a) > 0 {
					return usageError("unknown command %q for %q", a[0], cmd.CommandPath())
				}
				return cmd.Help()
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// flagError is pflag's refusal of a flag in a2ad's words: a bad value
// names the flag and the form it wants, not strconv's or time's message.
func flagError(err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return err
	}
	want := "see --help"
	switch bad.GetFlag().Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		want = "want a whole number"
	case "float32", "float64":
		want = "want a number"
	case "duration":
		want = "want a duration such as 90s, 10m or 24h"
	case "bool":
		want = "want true or false"
	case "intSlice":
		want = "want whole numbers separated by commas"
	}
	return fmt.Errorf("invalid value %q for --%s: %s", bad.GetValue(), bad.GetFlag().Name, want)
}

// run executes root with args and returns the exit status: 0, 1 for a
// runtime error, 2 for a usage error. An error is printed as
// "Error: MESSAGE" on stderr (with a pointer to --help for a usage error),
// or, when the command was given --json, as
// {"error":{"code":"…","message":"…"}} on stdout; a command that already
// reported its error (serve's log line, check-card's findings) sets
// SilenceErrors and prints nothing more.
func run(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	code, status := errorCode(err)
	if cmd == nil {
		cmd = root
	}
	if cmd.SilenceErrors && cmd != root {
		return status
	}
	if wantsJSON(cmd, args) {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		e.Error.Code, e.Error.Message = code, err.Error()
		b, _ := json.Marshal(e)
		fmt.Fprintf(stdout, "%s\n", b)
		return status
	}
	fmt.Fprintf(stderr, "Error: %s\n", err)
	if status == exitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return status
}

// wantsJSON reports whether the command line asked for JSON: the command's
// --json flag, or, when parsing stopped before it (a usage error), a
// --json among the arguments before "--".
func wantsJSON(cmd *cobra.Command, args []string) bool {
	if f := cmd.Flags().Lookup("json"); f != nil && f.Changed {
		return f.Value.String() == "true"
	}
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i]
	}
	return slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
}

// newVersion is `a2ad version [--json]`: the build's version and Go
// toolchain, as --version prints them, or version.Info as JSON.
func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print a2ad's version (module version, or VCS revision of a checkout build) and Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeIndented(cmd.OutOrStdout(), version.Get())
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get().String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"version","revision","modified","go"} as JSON`)
	return cmd
}
