package streaming

// Placeholder until the chat decoder lands.
type chatDecoder struct{ res Result }

func newChatDecoder() *chatDecoder { return &chatDecoder{} }

func (d *chatDecoder) Decode(ev *Event, emit func(*Part)) {}
func (d *chatDecoder) Finish() *Result                    { return &d.res }
func (d *chatDecoder) Result() *Result                    { return &d.res }

func decodeChatJSON(body []byte) (*Result, error) { return nil, ErrInvalidJSON }
