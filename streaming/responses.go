package streaming

// Placeholder until the responses decoder lands.
type responsesDecoder struct{ res Result }

func newResponsesDecoder() *responsesDecoder { return &responsesDecoder{} }

func (d *responsesDecoder) Decode(ev *Event, emit func(*Part)) {}
func (d *responsesDecoder) Finish() *Result                    { return &d.res }
func (d *responsesDecoder) Result() *Result                    { return &d.res }

func decodeResponsesJSON(body []byte) (*Result, error) { return nil, ErrInvalidJSON }
