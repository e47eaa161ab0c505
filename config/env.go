package config

import (
	"errors"
	"strconv"
	"strings"
)

// envSource is what one expanded field came from. It names variables only:
// their values may be secrets.
type envSource struct {
	line  int      // where the field is in the file, to order messages
	vars  []string // every variable referred to, in order
	unset []string // referred to without a default, and unset or empty
	empty bool     // the expanded value is ""
}

// notSet phrases the unset variables for a message: "A is not set",
// "A, B are not set".
func (s envSource) notSet() string {
	if len(s.unset) == 1 {
		return s.unset[0] + " is not set"
	}
	return strings.Join(s.unset, ", ") + " are not set"
}

var errBadReference = errors.New("malformed ${...} reference (want ${NAME} or ${NAME:-default}; $$ for a literal $)")

// expand replaces ${NAME} and ${NAME:-default} in s with values from getenv
// and $$ with $. A $ followed by anything else is kept, so values such as
// "$5" or a password containing "$x" need no escaping. The default is
// literal text up to the closing brace.
func expand(s string, getenv func(string) string) (string, envSource, error) {
	var (
		b   strings.Builder
		src envSource
	)
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", envSource{}, errBadReference
			}
			name, def, hasDefault := strings.Cut(s[i+2:i+2+end], ":-")
			if !validVarName(name) {
				return "", envSource{}, errBadReference
			}
			v := getenv(name)
			if v == "" {
				if hasDefault {
					v = def
				} else {
					src.unset = append(src.unset, name)
				}
			}
			src.vars = append(src.vars, name)
			b.WriteString(v)
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	out := b.String()
	src.empty = out == ""
	return out, src, nil
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Field paths name a place in the config the way a person would point at it
// in the file: "tenants[1].keys[0]", "prices[\"gpt-4.1\"].input". Parse records
// and Validate reports with the same helpers, so the two always agree.

func fieldPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

func keyPath(parent, key string) string {
	return parent + "[" + strconv.Quote(key) + "]"
}
