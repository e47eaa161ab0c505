// Package config owns gatekeeper's configuration file: its schema, its
// defaults, the expansion of ${VAR} references (secrets come from the
// environment, never from the file), and the validation that `serve` and
// `check-config` run before anything listens.
//
// The life of a config is DefaultConfig → Parse (or Load) → Validate. Parse
// reports problems with the file itself (malformed YAML, unknown keys, values
// of the wrong type) as a *ParseError with line numbers; Validate reports every
// semantic problem at once as a *ValidationError naming each field. Neither
// message ever quotes a secret.
//
// Environment references are expanded after the YAML is parsed, one string
// scalar at a time, so a variable whose value looks like YAML can never change
// the structure of the file. Supported forms: ${NAME}, ${NAME:-default}, and
// $$ for a literal dollar sign; any other $ is kept as written. A variable
// referenced without a default is required: if it is unset or empty, Validate
// reports the field and names the variable. Write ${NAME:-} to make one
// optional. Inside a flow collection ({...} or [...]) YAML itself requires
// such a value to be quoted: key: "${NAME}". A numeric, boolean or duration
// field may take its value from a variable too, quoted or not.
package config
