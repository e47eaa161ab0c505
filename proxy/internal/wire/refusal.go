package wire

import (
	"fmt"
	"net/http"
)

// Refusal is a request refused on the wire: Status and Msg are what the
// agent gets (an invalid_request_error in its provider's format).
type Refusal struct {
	Status int
	Msg    string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%d: %s", r.Status, r.Msg) }

func badRequest(msg string) *Refusal { return &Refusal{Status: http.StatusBadRequest, Msg: msg} }
