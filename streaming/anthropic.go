package streaming

// Placeholder until the anthropic decoder lands.
type anthropicDecoder struct{ res Result }

func newAnthropicDecoder() *anthropicDecoder { return &anthropicDecoder{} }

func (d *anthropicDecoder) Decode(ev *Event, emit func(*Part)) {}
func (d *anthropicDecoder) Finish() *Result                    { return &d.res }
func (d *anthropicDecoder) Result() *Result                    { return &d.res }

func decodeAnthropicJSON(body []byte) (*Result, error) { return nil, ErrInvalidJSON }
