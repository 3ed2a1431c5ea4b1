package setting

import (
	"flag"
	"fmt"
	"time"
)

// Flag declares one command-line flag of a settings struct C: its name
// (without dashes), the field it sets, which errors name in braces, its
// help, and Bind, which binds it to that field of a C: it returns the
// field's address (a *string, *int, *int64, *uint64, *float64, *bool or
// *time.Duration, registered as flag's own kinds are, so help reads the
// same) or a flag.Value of its own.
type Flag[C any] struct {
	Name, Field, Usage string
	Bind               func(c *C) any
	// UsageFunc, where set, makes the help when the flag is registered
	// (help that asks something filled in at init, such as a registry).
	UsageFunc func() string
}

// Table is the one declaration of a settings struct's flags: a command
// registers them from it, and error messages map fields to flags with it.
type Table[C any] []Flag[C]

// Register adds the named flags of t (every one where names is empty) to
// fs, bound to c's fields; each flag's default is the field's value in c.
// A name t lacks panics: that is a programming error.
func (t Table[C]) Register(fs *flag.FlagSet, c *C, names ...string) {
	if len(names) == 0 {
		for _, f := range t {
			f.register(fs, c, f.usage())
		}
		return
	}
	for _, n := range names {
		f, ok := t.Lookup(n)
		if !ok {
			panic(fmt.Sprintf("setting: no flag %q in the table", n))
		}
		f.register(fs, c, f.usage())
	}
}

// usage is f's help.
func (f Flag[C]) usage() string {
	if f.UsageFunc != nil {
		return f.UsageFunc()
	}
	return f.Usage
}

// register adds f to fs, bound to c's field, with usage.
func (f Flag[C]) register(fs *flag.FlagSet, c *C, usage string) {
	switch p := f.Bind(c).(type) {
	case *string:
		fs.StringVar(p, f.Name, *p, usage)
	case *int:
		fs.IntVar(p, f.Name, *p, usage)
	case *int64:
		fs.Int64Var(p, f.Name, *p, usage)
	case *uint64:
		fs.Uint64Var(p, f.Name, *p, usage)
	case *float64:
		fs.Float64Var(p, f.Name, *p, usage)
	case *bool:
		fs.BoolVar(p, f.Name, *p, usage)
	case *time.Duration:
		fs.DurationVar(p, f.Name, *p, usage)
	case flag.Value:
		fs.Var(p, f.Name, usage)
	default:
		panic(fmt.Sprintf("setting: flag %q binds a %T", f.Name, p))
	}
}

// RegisterUsage adds flag name of t to fs with another help text, for a
// command that uses it its own way.
func (t Table[C]) RegisterUsage(fs *flag.FlagSet, c *C, name, usage string) {
	f, ok := t.Lookup(name)
	if !ok {
		panic(fmt.Sprintf("setting: no flag %q in the table", name))
	}
	f.register(fs, c, usage)
}

// Lookup is the flag named name.
func (t Table[C]) Lookup(name string) (Flag[C], bool) {
	for _, f := range t {
		if f.Name == name {
			return f, true
		}
	}
	return Flag[C]{}, false
}

// FlagOf is the flag that sets field, without dashes.
func (t Table[C]) FlagOf(field string) (string, bool) {
	for _, f := range t {
		if f.Field == field {
			return f.Name, true
		}
	}
	return "", false
}
