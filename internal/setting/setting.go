// Package setting is how fleet's libraries refuse a setting: with an error
// that names each setting by its field in the settings struct the library
// was given (train.Config's BatchSize, launch.Options' NNodes), so that a
// front end can name it its own way. The command line names fields by the
// flags that set them (BatchSize is --batch-size); a program that fills
// train.Config itself reads the field names, or finds the field at fault
// with errors.As into an interface{ Setting() string }. It sits with the
// other internal packages at the bottom of the layers, so that every
// library may use it.
package setting

import (
	"fmt"
	"regexp"
	"strings"
)

// Error is an error that names settings: a refused one, or one the
// message advises changing. Its message is a format whose settings are
// field names in braces ("{BatchSize} must be positive, got %d"); a
// doubled brace ({{) is a brace.
type Error struct {
	// Name is the setting at fault: the first field the message names.
	Name   string
	format string
	args   []any
}

// placeholder matches a field name in braces, or a doubled brace.
var placeholder = regexp.MustCompile(`\{\{|\{([A-Z][A-Za-z0-9]*)\}`)

// Errorf returns an *Error. format is fmt's, with settings written as
// field names in braces; an error among args (%w) is what it wraps.
func Errorf(format string, args ...any) error {
	e := &Error{format: format, args: args}
	for _, m := range placeholder.FindAllStringSubmatch(format, -1) {
		if m[1] != "" {
			e.Name = m[1]
			break
		}
	}
	return e
}

// Literal escapes text for an Errorf format: its verbs and braces stay as
// they are.
func Literal(text string) string {
	return strings.NewReplacer("%", "%%", "{", "{{").Replace(text)
}

// Error names settings by their fields.
func (e *Error) Error() string { return e.Render(nil) }

// Setting is Name: what a program outside fleet, which cannot name this
// package's types, finds with errors.As into an interface{ Setting() string }.
func (e *Error) Setting() string { return e.Name }

// Render is the message with each setting written as name(field); a nil
// name, or one that returns "", leaves the field's own name. Errors among
// the arguments that are or wrap an *Error are rendered with name too.
func (e *Error) Render(name func(field string) string) string {
	format := placeholder.ReplaceAllStringFunc(e.format, func(m string) string {
		if m == "{{" {
			return "{"
		}
		field := m[1 : len(m)-1]
		if name != nil {
			if n := name(field); n != "" {
				field = n
			}
		}
		return strings.ReplaceAll(field, "%", "%%")
	})
	format = wrapVerbs(format)
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if err, ok := a.(error); ok && name != nil {
			a = Message(err, name)
		}
		args[i] = a
	}
	return fmt.Sprintf(format, args...)
}

// Unwrap returns the errors among the arguments.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, a := range e.args {
		if err, ok := a.(error); ok {
			errs = append(errs, err)
		}
	}
	return errs
}

// Message is err's message with the settings of every *Error in its chain
// written as name(field) (see Error.Render).
func Message(err error, name func(field string) string) string {
	msg := err.Error()
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*Error); ok {
			msg = strings.Replace(msg, e.Error(), e.Render(name), 1)
			return // Render has rendered what e wraps
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if inner := u.Unwrap(); inner != nil {
				walk(inner)
			}
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return msg
}

// wrapVerbs turns each %w verb of format into %v (Sprintf has no %w),
// leaving escaped percent signs (%%w is a percent sign and a w) alone.
func wrapVerbs(format string) string {
	if !strings.Contains(format, "%w") {
		return format
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		b.WriteByte(c)
		if c != '%' || i+1 >= len(format) {
			continue
		}
		i++
		switch format[i] {
		case 'w':
			b.WriteByte('v')
		default:
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// sentinel brackets a field name in Portable's intermediate text: bytes no
// message holds.
const sentinel = "\x00"

// Portable is err's message as an Errorf format: text escaped (Literal),
// and the settings of every *Error in its chain kept as field names in
// braces. A process that receives it from another (the ranks of a job
// send their refusals to each other as text) rebuilds an *Error with
// Errorf(prefix + Portable(err)), which its front end renders as it
// renders its own.
func Portable(err error) string {
	msg := Message(err, func(field string) string { return sentinel + field + sentinel })
	parts := strings.Split(msg, sentinel)
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 {
			b.WriteString("{" + p + "}")
		} else {
			b.WriteString(Literal(p))
		}
	}
	return b.String()
}
