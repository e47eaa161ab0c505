package trajectory

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the record's JSON form (MarshalJSON's) to dst. It
// writes what encoding/json writes for the wire structs of json.go, byte
// for byte, without reflection: every store update encodes each record of
// its chain. A value encoding/json refuses (a time whose year is outside
// [0,9999] or whose zone is 24 hours or more away, a NaN or infinite
// float) makes it return dst unchanged and encoding/json's error for that
// value.
func (r *Record) AppendJSON(dst []byte) ([]byte, error) {
	var err error
	b := appendRecord(dst, r, &err)
	if err != nil {
		return dst, err
	}
	return b, nil
}

// sizeJSON is a guess of the record's JSON length: fields and figures take
// about 900 bytes, to which its strings add theirs.
func (r *Record) sizeJSON() int {
	n := 900 + len(r.ID) + len(r.ParentID) + len(r.Tenant) + len(r.ExitReason) + len(r.LastStopReason) +
		len(r.CreatedBy.Name) + len(r.Thread) + len(r.Provider) + len(r.Model) + len(r.Call) + len(r.SettledCall) + len(r.CallOwner)
	for _, c := range r.Children {
		n += len(c) + 3
	}
	for _, c := range r.LostCalls {
		n += len(c) + 3
	}
	for _, c := range r.SweptCalls {
		n += len(c.Call) + 80
	}
	for _, c := range r.Pending.ToolCalls {
		n += len(c.ID) + len(c.Name) + 80
	}
	return n + 20*len(r.Watch.Calls) + r.Person.sizeJSON()
}

// The appenders below return the slice rather than keep it in a struct:
// a slice header stored through a pointer at every append costs a write
// barrier while the collector runs. Those that may meet a value
// encoding/json refuses take err, which they set to the first refusal (see
// refuse) before writing on; the caller then throws away what was written.

func appendRecord(b []byte, r *Record, err *error) []byte {
	b = append(b, `{"id":`...)
	b = AppendJSONString(b, r.ID)
	b = append(b, `,"parent_id":`...)
	b = appendNullable(b, r.ParentID)
	b = append(b, `,"tenant":`...)
	b = AppendJSONString(b, r.Tenant)
	b = append(b, `,"state":`...)
	b = AppendJSONString(b, string(r.State))
	b = append(b, `,"exit_reason":`...)
	b = appendNullable(b, r.ExitReason)
	b = append(b, `,"turns":`...)
	b = strconv.AppendInt(b, r.Turns, 10)
	b = append(b, `,"last_stop_reason":`...)
	b = AppendJSONString(b, r.LastStopReason)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, r.CreatedAt, err)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, r.UpdatedAt, err)
	if r.CreatedBy != (Creator{}) {
		b = append(b, `,"created_by":{"kind":`...)
		b = AppendJSONString(b, r.CreatedBy.Kind)
		b = append(b, `,"name":`...)
		b = AppendJSONString(b, r.CreatedBy.Name)
		b = append(b, '}')
	}

	b = append(b, `,"budget":{"turns":`...)
	b = strconv.AppendInt(b, r.Budget.Turns, 10)
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, r.Budget.Tokens, 10)
	b = append(b, `,"wall_clock_s":`...)
	b = strconv.AppendInt(b, r.Budget.WallClockS, 10)
	b = append(b, `,"dollars":`...)
	b = appendFloat(b, r.Budget.Dollars, err)
	if r.Budget.OnExhaust != "" {
		b = append(b, `,"on_exhaust":`...)
		b = AppendJSONString(b, r.Budget.OnExhaust)
	}

	b = append(b, `},"spend":{"turns":`...)
	b = strconv.AppendInt(b, r.Spend.Turns, 10)
	b = append(b, `,"input_tokens":`...)
	b = strconv.AppendInt(b, r.Spend.InputTokens, 10)
	b = append(b, `,"cached_input_tokens":`...)
	b = strconv.AppendInt(b, r.Spend.CachedInputTokens, 10)
	b = append(b, `,"cache_write_tokens":`...)
	b = strconv.AppendInt(b, r.Spend.CacheWriteTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, r.Spend.OutputTokens, 10)
	b = append(b, `,"dollars":`...)
	b = appendFloat(b, r.Spend.Dollars, err)
	b = append(b, `,"wall_clock_s":`...)
	b = appendFloat(b, r.Spend.WallClockS, err)
	b = append(b, `,"estimated":`...)
	b = strconv.AppendBool(b, r.Spend.Estimated)

	b = append(b, `},"budget_used":`...)
	b = appendFloat(b, r.BudgetUsed, err)
	b = append(b, `,"binding_dimension":`...)
	b = AppendJSONString(b, r.BindingDimension)
	b = append(b, `,"stage":`...)
	b = AppendJSONString(b, r.Stage)
	b = appendPending(b, &r.Pending, err)
	b = append(b, `,"children":[`...)
	for i, c := range r.Children {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendJSONString(b, c)
	}
	b = append(b, ']')

	b = appendOptString(b, `,"thread":`, r.Thread)
	b = appendOptString(b, `,"provider":`, r.Provider)
	b = appendOptString(b, `,"model":`, r.Model)
	b = appendOptTime(b, `,"started_at":`, r.StartedAt, err)
	b = appendOptReservation(b, `,"reserved":`, r.Reserved)
	b = appendOptString(b, `,"call":`, r.Call)
	b = appendOptReservation(b, `,"call_reserved":`, r.CallReserved)
	b = appendOptString(b, `,"settled_call":`, r.SettledCall)
	b = appendOptString(b, `,"call_owner":`, r.CallOwner)
	b = appendOptTime(b, `,"call_beat":`, r.CallBeat, err)
	b = appendOptInt(b, `,"call_input_tokens":`, r.CallInput)
	b = appendOptInt(b, `,"call_output_tokens":`, r.CallOutput)
	if len(r.LostCalls) > 0 {
		b = append(b, `,"lost_calls":[`...)
		for i, c := range r.LostCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, c)
		}
		b = append(b, ']')
	}
	if len(r.SweptCalls) > 0 {
		b = append(b, `,"swept_calls":[`...)
		for i, c := range r.SweptCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"call":`...)
			b = AppendJSONString(b, c.Call)
			b = append(b, `,"input_tokens":`...)
			b = strconv.AppendInt(b, c.InputTokens, 10)
			b = append(b, `,"output_tokens":`...)
			b = strconv.AppendInt(b, c.OutputTokens, 10)
			b = append(b, `,"dollars":`...)
			b = appendFloat(b, c.Dollars, err)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.FallbackPriced {
		b = append(b, `,"fallback_priced":true`...)
	}
	b = appendOptTime(b, `,"held_since":`, r.HeldSince, err)
	if r.WaitedS != 0 {
		b = append(b, `,"waited_s":`...)
		b = appendFloat(b, r.WaitedS, err)
	}
	b = appendOptString(b, `,"pause_reason":`, r.PauseReason)
	b = appendOptInt(b, `,"truncations":`, r.Truncations)
	b = appendOptInt(b, `,"truncations_in_row":`, r.TruncationsInRow)
	b = appendOptString(b, `,"outcome":`, r.Outcome)
	b = appendOptString(b, `,"task_class":`, r.TaskClass)
	if !r.Watch.IsZero() {
		b = append(b, `,"watch":`...)
		b = appendWatch(b, &r.Watch)
	}
	if r.Person != nil {
		b = append(b, `,"person":`...)
		b = appendPerson(b, r.Person)
	}
	return append(b, '}')
}

func appendPending(b []byte, p *Pending, err *error) []byte {
	b = append(b, `,"pending":{"tool_calls":[`...)
	for i := range p.ToolCalls {
		c := &p.ToolCalls[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = AppendJSONString(b, c.ID)
		b = append(b, `,"name":`...)
		b = AppendJSONString(b, c.Name)
		b = append(b, `,"deadline":`...)
		b = appendDeadline(b, &c.Deadline, err)
		b = append(b, '}')
	}
	b = append(b, `],"approval_id":`...)
	b = appendNullable(b, p.ApprovalID)
	b = append(b, `,"control":`...)
	if c := p.Control; c == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"kind":`...)
		b = AppendJSONString(b, string(c.Kind))
		b = appendOptString(b, `,"message":`, c.Message)
		b = appendOptString(b, `,"by":`, c.By)
		b = append(b, `,"at":`...)
		b = appendTime(b, c.At, err)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendDeadline writes a tool call's deadline, null when it has none.
func appendDeadline(b []byte, d *time.Time, err *error) []byte {
	if d.IsZero() {
		return append(b, "null"...)
	}
	b, ok := appendRFC3339(b, *d)
	if !ok {
		// The wire struct holds a *time.Time, which encoding/json's
		// error names.
		refuse(err, d)
	}
	return b
}

func appendWatch(b []byte, wa *Watch) []byte {
	b = append(b, '{')
	// Every field may be left out, so each one but the first written
	// starts with a comma.
	n0 := len(b)
	field := func(b []byte, key string) []byte {
		if len(b) > n0 {
			b = append(b, ',')
		}
		return append(b, key...)
	}
	if len(wa.Calls) > 0 {
		b = field(b, `"calls":[`)
		for i, d := range wa.Calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendDigest(b, d)
		}
		b = append(b, ']')
	}
	if wa.Result != 0 {
		b = field(b, `"result":`)
		b = appendDigest(b, wa.Result)
	}
	if wa.ResultsInRow != 0 {
		b = field(b, `"results_in_row":`)
		b = strconv.AppendInt(b, wa.ResultsInRow, 10)
	}
	if wa.ErrorsInRow != 0 {
		b = field(b, `"errors_in_row":`)
		b = strconv.AppendInt(b, wa.ErrorsInRow, 10)
	}
	if wa.IdleTurns != 0 {
		b = field(b, `"idle_turns":`)
		b = strconv.AppendInt(b, wa.IdleTurns, 10)
	}
	if wa.Step != "" {
		b = field(b, `"step":`)
		b = AppendJSONString(b, string(wa.Step))
	}
	if s := wa.Signal; s != nil {
		b = field(b, `"signal":{"kind":`)
		b = AppendJSONString(b, s.Kind)
		b = appendOptString(b, `,"tool":`, s.Tool)
		if s.Digest != 0 {
			b = append(b, `,"digest":`...)
			b = appendDigest(b, s.Digest)
		}
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, s.Count, 10)
		b = append(b, `,"threshold":`...)
		b = strconv.AppendInt(b, s.Threshold, 10)
		b = appendOptInt(b, `,"window":`, s.Window)
		b = append(b, '}')
	}
	if wa.StepTurn != 0 {
		b = field(b, `"step_turn":`)
		b = strconv.AppendInt(b, wa.StepTurn, 10)
	}
	if wa.Notice {
		b = field(b, `"notice":true`)
	}
	return append(b, '}')
}

// appendDigest writes Digest.MarshalText's 16 hex digits as a string.
func appendDigest(b []byte, d Digest) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[(d>>shift)&0xf])
	}
	return append(b, '"')
}

func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendJSONString(append(b, key...), s)
}

func appendOptInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendOptTime(b []byte, key string, t time.Time, err *error) []byte {
	if t.IsZero() {
		return b
	}
	return appendTime(append(b, key...), t, err)
}

func appendOptReservation(b []byte, key string, r Reservation) []byte {
	if r == (Reservation{}) {
		return b
	}
	b = append(b, key...)
	b = append(b, `{"calls":`...)
	b = strconv.AppendInt(b, r.Calls, 10)
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, r.Tokens, 10)
	b = append(b, `,"micros":`...)
	b = strconv.AppendInt(b, r.Micros, 10)
	return append(b, '}')
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return AppendJSONString(b, s)
}

// appendTime writes t as time.Time.MarshalJSON does.
func appendTime(b []byte, t time.Time, err *error) []byte {
	b, ok := appendRFC3339(b, t)
	if !ok {
		refuse(err, t)
	}
	return b
}

// appendRFC3339 writes t as time.Time.MarshalJSON does: RFC 3339 with
// nanoseconds, refused when the year is not four digits or the zone's hours
// not below 24, which RFC 3339 cannot say. It writes nothing when it
// refuses.
func appendRFC3339(b []byte, t time.Time) ([]byte, bool) {
	n0 := len(b)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	s := b[n0+1:]
	ok := len(s) > 4 && s[4] == '-'
	if ok && s[len(s)-1] != 'Z' {
		c := s[len(s)-len("Z07:00")]
		h := 10*(s[len(s)-5]-'0') + (s[len(s)-4] - '0')
		ok = !('0' <= c && c <= '9') && h < 24
	}
	if !ok {
		return b[:n0], false
	}
	return append(b, '"'), true
}

// appendFloat writes f as encoding/json does (AppendJSONFloat).
func appendFloat(b []byte, f float64, err *error) []byte {
	b, ok := AppendJSONFloat(b, f)
	if !ok {
		refuse(err, f)
	}
	return b
}

// AppendJSONFloat appends f as encoding/json writes a float64: like ES6's
// number to string, 'f' form unless the exponent is below -6 or 21 and
// above, and no leading zero in a negative exponent. A NaN or an infinity,
// which encoding/json refuses, makes it return b unchanged and false.
func AppendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// refuse keeps the first refusal in err: the error encoding/json gives for
// v, so that the caller sees what the reflective encoder said.
func refuse(err *error, v any) {
	if *err != nil {
		return
	}
	_, e := json.Marshal(v)
	if e == nil {
		panic("trajectory: encoding/json accepts a value the record's encoder refused")
	}
	*err = e
}

// htmlSafe reports an ASCII byte encoding/json writes as it is in a
// string (its htmlSafeSet): printable, and neither a quote, a backslash
// nor one of < > &.
func htmlSafe(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// AppendJSONString appends s as encoding/json writes a string with HTML
// escaping on (json.Marshal's): control bytes, quotes, backslashes and
// < > & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func AppendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
