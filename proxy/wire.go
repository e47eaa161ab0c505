package proxy

import (
	"net/http"
	"strconv"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/wire"
)

// redactErrorBody removes every fragment of keys from an error reply of
// up (wire.RedactErrorBody); a body it cannot check is replaced by a
// message of gatekeeper's own in up's error format.
func redactErrorBody(resp *http.Response, up *upstream, keys []string) {
	wire.RedactErrorBody(resp, keys, func(status int) []byte {
		return apierr.Body(up.api, apierr.Upstream, "provider "+up.cfg.Name+" answered "+strconv.Itoa(status)+
			" with a body gatekeeper could not check for key fragments; see gatekeeper's logs")
	})
}
