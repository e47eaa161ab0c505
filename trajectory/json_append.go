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
	n0 := len(dst)
	w := jsonWriter{b: dst}
	w.record(r)
	if w.err != nil {
		return dst[:n0], w.err
	}
	return w.b, nil
}

// sizeJSON is a guess of the record's JSON length: fields and figures take
// about 900 bytes, to which its strings add theirs.
func (r *Record) sizeJSON() int {
	n := 900 + len(r.ID) + len(r.ParentID) + len(r.Tenant) + len(r.ExitReason) + len(r.LastStopReason) +
		len(r.Thread) + len(r.Provider) + len(r.Model) + len(r.Call) + len(r.SettledCall) + len(r.CallOwner)
	for _, c := range r.Children {
		n += len(c) + 3
	}
	for _, c := range r.LostCalls {
		n += len(c) + 3
	}
	for _, c := range r.Pending.ToolCalls {
		n += len(c.ID) + len(c.Name) + 80
	}
	return n + 20*len(r.Watch.Calls)
}

// jsonWriter appends JSON to b. The first value encoding/json would refuse
// sets err; what is written after it is thrown away.
type jsonWriter struct {
	b   []byte
	err error
}

func (w *jsonWriter) record(r *Record) {
	w.b = append(w.b, `{"id":`...)
	w.str(r.ID)
	w.b = append(w.b, `,"parent_id":`...)
	w.nullable(r.ParentID)
	w.b = append(w.b, `,"tenant":`...)
	w.str(r.Tenant)
	w.b = append(w.b, `,"state":`...)
	w.str(string(r.State))
	w.b = append(w.b, `,"exit_reason":`...)
	w.nullable(r.ExitReason)
	w.b = append(w.b, `,"turns":`...)
	w.int(r.Turns)
	w.b = append(w.b, `,"last_stop_reason":`...)
	w.str(r.LastStopReason)
	w.b = append(w.b, `,"created_at":`...)
	w.time(r.CreatedAt)
	w.b = append(w.b, `,"updated_at":`...)
	w.time(r.UpdatedAt)

	w.b = append(w.b, `,"budget":{"turns":`...)
	w.int(r.Budget.Turns)
	w.b = append(w.b, `,"tokens":`...)
	w.int(r.Budget.Tokens)
	w.b = append(w.b, `,"wall_clock_s":`...)
	w.int(r.Budget.WallClockS)
	w.b = append(w.b, `,"dollars":`...)
	w.float(r.Budget.Dollars)
	if r.Budget.OnExhaust != "" {
		w.b = append(w.b, `,"on_exhaust":`...)
		w.str(r.Budget.OnExhaust)
	}

	w.b = append(w.b, `},"spend":{"turns":`...)
	w.int(r.Spend.Turns)
	w.b = append(w.b, `,"input_tokens":`...)
	w.int(r.Spend.InputTokens)
	w.b = append(w.b, `,"cached_input_tokens":`...)
	w.int(r.Spend.CachedInputTokens)
	w.b = append(w.b, `,"cache_write_tokens":`...)
	w.int(r.Spend.CacheWriteTokens)
	w.b = append(w.b, `,"output_tokens":`...)
	w.int(r.Spend.OutputTokens)
	w.b = append(w.b, `,"dollars":`...)
	w.float(r.Spend.Dollars)
	w.b = append(w.b, `,"wall_clock_s":`...)
	w.float(r.Spend.WallClockS)
	w.b = append(w.b, `,"estimated":`...)
	w.b = strconv.AppendBool(w.b, r.Spend.Estimated)

	w.b = append(w.b, `},"budget_used":`...)
	w.float(r.BudgetUsed)
	w.b = append(w.b, `,"binding_dimension":`...)
	w.str(r.BindingDimension)
	w.b = append(w.b, `,"stage":`...)
	w.str(r.Stage)
	w.pending(&r.Pending)
	w.b = append(w.b, `,"children":[`...)
	for i, c := range r.Children {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(c)
	}
	w.b = append(w.b, ']')

	w.optStr(`,"thread":`, r.Thread)
	w.optStr(`,"provider":`, r.Provider)
	w.optStr(`,"model":`, r.Model)
	w.optTime(`,"started_at":`, r.StartedAt)
	w.optReservation(`,"reserved":`, r.Reserved)
	w.optStr(`,"call":`, r.Call)
	w.optReservation(`,"call_reserved":`, r.CallReserved)
	w.optStr(`,"settled_call":`, r.SettledCall)
	w.optStr(`,"call_owner":`, r.CallOwner)
	w.optTime(`,"call_beat":`, r.CallBeat)
	w.optInt(`,"call_input_tokens":`, r.CallInput)
	w.optInt(`,"call_output_tokens":`, r.CallOutput)
	if len(r.LostCalls) > 0 {
		w.b = append(w.b, `,"lost_calls":[`...)
		for i, c := range r.LostCalls {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.str(c)
		}
		w.b = append(w.b, ']')
	}
	if r.FallbackPriced {
		w.b = append(w.b, `,"fallback_priced":true`...)
	}
	w.optTime(`,"held_since":`, r.HeldSince)
	if r.WaitedS != 0 {
		w.b = append(w.b, `,"waited_s":`...)
		w.float(r.WaitedS)
	}
	w.optStr(`,"pause_reason":`, r.PauseReason)
	w.optInt(`,"truncations":`, r.Truncations)
	w.optInt(`,"truncations_in_row":`, r.TruncationsInRow)
	w.optStr(`,"outcome":`, r.Outcome)
	w.optStr(`,"task_class":`, r.TaskClass)
	if !r.Watch.IsZero() {
		w.b = append(w.b, `,"watch":`...)
		w.watch(&r.Watch)
	}
	w.b = append(w.b, '}')
}

func (w *jsonWriter) pending(p *Pending) {
	w.b = append(w.b, `,"pending":{"tool_calls":[`...)
	for i := range p.ToolCalls {
		c := &p.ToolCalls[i]
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `{"id":`...)
		w.str(c.ID)
		w.b = append(w.b, `,"name":`...)
		w.str(c.Name)
		w.b = append(w.b, `,"deadline":`...)
		if c.Deadline.IsZero() {
			w.b = append(w.b, "null"...)
		} else if !w.rfc3339(c.Deadline) {
			// The wire struct holds a *time.Time, which encoding/json's
			// error names.
			w.fail(&c.Deadline)
		}
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, `],"approval_id":`...)
	w.nullable(p.ApprovalID)
	w.b = append(w.b, `,"control":`...)
	if c := p.Control; c == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, `{"kind":`...)
		w.str(string(c.Kind))
		w.optStr(`,"message":`, c.Message)
		w.optStr(`,"by":`, c.By)
		w.b = append(w.b, `,"at":`...)
		w.time(c.At)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, '}')
}

func (w *jsonWriter) watch(wa *Watch) {
	w.b = append(w.b, '{')
	// Every field may be left out, so each one but the first written
	// starts with a comma.
	n0 := len(w.b)
	field := func(key string) {
		if len(w.b) > n0 {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, key...)
	}
	if len(wa.Calls) > 0 {
		field(`"calls":[`)
		for i, d := range wa.Calls {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.digest(d)
		}
		w.b = append(w.b, ']')
	}
	if wa.Result != 0 {
		field(`"result":`)
		w.digest(wa.Result)
	}
	if wa.ResultsInRow != 0 {
		field(`"results_in_row":`)
		w.int(wa.ResultsInRow)
	}
	if wa.ErrorsInRow != 0 {
		field(`"errors_in_row":`)
		w.int(wa.ErrorsInRow)
	}
	if wa.IdleTurns != 0 {
		field(`"idle_turns":`)
		w.int(wa.IdleTurns)
	}
	if wa.Step != "" {
		field(`"step":`)
		w.str(string(wa.Step))
	}
	if s := wa.Signal; s != nil {
		field(`"signal":{"kind":`)
		w.str(s.Kind)
		w.optStr(`,"tool":`, s.Tool)
		if s.Digest != 0 {
			w.b = append(w.b, `,"digest":`...)
			w.digest(s.Digest)
		}
		w.b = append(w.b, `,"count":`...)
		w.int(s.Count)
		w.b = append(w.b, `,"threshold":`...)
		w.int(s.Threshold)
		w.optInt(`,"window":`, s.Window)
		w.b = append(w.b, '}')
	}
	if wa.StepTurn != 0 {
		field(`"step_turn":`)
		w.int(wa.StepTurn)
	}
	if wa.Notice {
		field(`"notice":true`)
	}
	w.b = append(w.b, '}')
}

// digest writes Digest.MarshalText's 16 hex digits as a string.
func (w *jsonWriter) digest(d Digest) {
	const hexDigits = "0123456789abcdef"
	w.b = append(w.b, '"')
	for shift := 60; shift >= 0; shift -= 4 {
		w.b = append(w.b, hexDigits[(d>>shift)&0xf])
	}
	w.b = append(w.b, '"')
}

func (w *jsonWriter) optStr(key, s string) {
	if s != "" {
		w.b = append(w.b, key...)
		w.str(s)
	}
}

func (w *jsonWriter) optInt(key string, v int64) {
	if v != 0 {
		w.b = append(w.b, key...)
		w.int(v)
	}
}

func (w *jsonWriter) optTime(key string, t time.Time) {
	if !t.IsZero() {
		w.b = append(w.b, key...)
		w.time(t)
	}
}

func (w *jsonWriter) optReservation(key string, r Reservation) {
	if r != (Reservation{}) {
		w.b = append(w.b, key...)
		w.b = append(w.b, `{"calls":`...)
		w.int(r.Calls)
		w.b = append(w.b, `,"tokens":`...)
		w.int(r.Tokens)
		w.b = append(w.b, `,"micros":`...)
		w.int(r.Micros)
		w.b = append(w.b, '}')
	}
}

func (w *jsonWriter) int(v int64) { w.b = strconv.AppendInt(w.b, v, 10) }

func (w *jsonWriter) nullable(s string) {
	if s == "" {
		w.b = append(w.b, "null"...)
		return
	}
	w.str(s)
}

// time writes t as time.Time.MarshalJSON does.
func (w *jsonWriter) time(t time.Time) {
	if !w.rfc3339(t) {
		w.fail(t)
	}
}

// rfc3339 writes t as time.Time.MarshalJSON does: RFC 3339 with
// nanoseconds, refused when the year is not four digits or the zone's hours
// not below 24, which RFC 3339 cannot say. It writes nothing when it
// refuses.
func (w *jsonWriter) rfc3339(t time.Time) bool {
	n0 := len(w.b)
	w.b = append(w.b, '"')
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	s := w.b[n0+1:]
	ok := len(s) > 4 && s[4] == '-'
	if ok && s[len(s)-1] != 'Z' {
		c := s[len(s)-len("Z07:00")]
		h := 10*(s[len(s)-5]-'0') + (s[len(s)-4] - '0')
		ok = !('0' <= c && c <= '9') && h < 24
	}
	if !ok {
		w.b = w.b[:n0]
		return false
	}
	w.b = append(w.b, '"')
	return true
}

// float writes f as encoding/json does: like ES6's number to string, 'f'
// form unless the exponent is below -6 or 21 and above, and no leading zero
// in a negative exponent.
func (w *jsonWriter) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.fail(f)
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.b = strconv.AppendFloat(w.b, f, format, -1, 64)
	if format == 'e' {
		n := len(w.b)
		if n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

// fail keeps the first refusal: the error encoding/json gives for v, so
// that the caller sees what the reflective encoder said.
func (w *jsonWriter) fail(v any) {
	if w.err != nil {
		return
	}
	_, err := json.Marshal(v)
	if err == nil {
		panic("trajectory: encoding/json accepts a value the record's encoder refused")
	}
	w.err = err
}

// htmlSafe marks the ASCII bytes encoding/json writes as they are in a
// string (its htmlSafeSet): printable, and neither a quote, a backslash nor
// one of < > &.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// str writes s as encoding/json writes a string with HTML escaping on:
// control bytes, quotes, backslashes and < > & escaped, invalid UTF-8 as
// U+FFFD, U+2028 and U+2029 escaped.
func (w *jsonWriter) str(s string) {
	const hexDigits = "0123456789abcdef"
	b := append(w.b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
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
	w.b = append(b, '"')
}
