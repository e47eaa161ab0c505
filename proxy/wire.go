package proxy

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
)

// The agent-facing wire (package wire) bound to what proxy knows: a
// request's upstream, its dialect, and the agent's error form.

// refused is err in the agent's error form: a *wire.Refusal becomes the
// invalid_request_error it describes; any other error is returned as it is.
func refused(err error) error {
	var r *wire.Refusal
	if errors.As(err, &r) {
		return &apierr.Error{Code: r.Status, Type: apierr.InvalidRequest, Msg: r.Msg}
	}
	return err
}

// readBody is wire.ReadBody with its refusal in the agent's error form.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	body, err := wire.ReadBody(w, r, limit, timeout)
	return body, refused(err)
}

// checkTurnBody checks a turn request's members (wire.CheckTurnBody); a
// background response is refused where api has them unless
// allowBackground.
func checkTurnBody(api streaming.API, body []byte, allowBackground bool) error {
	return refused(wire.CheckTurnBody(body, dialect.Of(api).Background && !allowBackground))
}

// checkHostedMCP is wire.CheckHostedMCP with its refusal in the agent's
// error form.
func checkHostedMCP(body []byte) error { return refused(wire.CheckHostedMCP(body)) }

// checkBetas refuses an Anthropic request naming a beta outside its
// tenant's anthropic_beta list (wire.CheckBetas).
func checkBetas(t *config.Tenant, up *upstream, h http.Header) error {
	return refused(wire.CheckBetas(t.AnthropicBeta, up.cfg.API, h))
}

// redactErrorBody removes every fragment of keys from an error reply of
// up (wire.RedactErrorBody); a body it cannot check is replaced by a
// message of gatekeeper's own in up's error format.
func redactErrorBody(resp *http.Response, up *upstream, keys []string) {
	wire.RedactErrorBody(resp, keys, func(status int) []byte {
		return apierr.Body(up.api, apierr.Upstream, "provider "+up.cfg.Name+" answered "+strconv.Itoa(status)+
			" with a body gatekeeper could not check for key fragments; see gatekeeper's logs")
	})
}
