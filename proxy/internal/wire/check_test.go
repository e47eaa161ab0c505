package wire_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/wire"
)

func TestCheck(t *testing.T) {
	kr := wire.NewKeyring([]config.Tenant{{Name: "acme", Keys: []string{"vk-acme"}, AnthropicBeta: []string{"ok-beta"}}})
	tests := []struct {
		name     string
		method   string
		tid      string
		rest     string
		header   map[string]string
		wantCode int // 0: no refusal
		probe    bool
		path     string
	}{
		{name: "turn", method: "POST", rest: "/v1/messages", header: map[string]string{"X-Api-Key": "vk-acme"}, path: "/v1/messages"},
		{name: "bearer", method: "POST", rest: "/v1/messages", header: map[string]string{"Authorization": "Bearer vk-acme"}, path: "/v1/messages"},
		{name: "escaped slash", method: "POST", rest: "/v1%2fmessages", wantCode: http.StatusBadRequest},
		{name: "probe before the key", method: "HEAD", rest: "/", probe: true, path: "/"},
		{name: "bad trajectory id", method: "POST", tid: "a b", rest: "/v1/messages", header: map[string]string{"X-Api-Key": "vk-acme"}, wantCode: http.StatusBadRequest},
		{name: "no key", method: "POST", rest: "/v1/messages", wantCode: http.StatusUnauthorized},
		{name: "unknown key", method: "POST", rest: "/v1/messages", header: map[string]string{"X-Api-Key": "vk-other"}, wantCode: http.StatusUnauthorized},
		{name: "beta not allowed", method: "POST", rest: "/v1/messages", header: map[string]string{"X-Api-Key": "vk-acme", "Anthropic-Beta": "other"}, wantCode: http.StatusBadRequest},
		{name: "beta allowed", method: "POST", rest: "/v1/messages", header: map[string]string{"X-Api-Key": "vk-acme", "Anthropic-Beta": "ok-beta"}, path: "/v1/messages"},
		{name: "websocket", method: "GET", rest: "/v1/responses", header: map[string]string{"X-Api-Key": "vk-acme", "Upgrade": "websocket"}, wantCode: http.StatusUpgradeRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "/p"+tt.rest, nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			c, err := wire.Check(r, kr, config.APIAnthropic, tt.tid, tt.rest)
			if tt.wantCode != 0 {
				var ae *apierr.Error
				if !errors.As(err, &ae) || ae.Code != tt.wantCode {
					t.Fatalf("Check: %v, want a %d", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if c.Probe != tt.probe || c.Path != tt.path || !tt.probe && (c.Tenant == nil || c.Tenant.Name != "acme") {
				t.Errorf("Check = %+v, want probe %v path %q tenant acme", c, tt.probe, tt.path)
			}
		})
	}
}

func TestProviderRest(t *testing.T) {
	tests := []struct {
		name, escaped, tid, provider, want string
		ok                                 bool
	}{
		{name: "plain", escaped: "/anth/v1/messages", provider: "anth", want: "/v1/messages", ok: true},
		{name: "trajectory", escaped: "/t/run-1/anth/v1/messages", tid: "run-1", provider: "anth", want: "/v1/messages", ok: true},
		{name: "trajectory escaped", escaped: "/t/run%3A1/anth/v1/messages", tid: "run:1", provider: "anth", want: "/v1/messages", ok: true},
		{name: "no provider segment", escaped: "/t/x/other", tid: "x", provider: "anth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := wire.ProviderRest(tt.escaped, tt.tid, tt.provider)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ProviderRest(%q) = %q, %v; want %q, %v", tt.escaped, got, ok, tt.want, tt.ok)
			}
		})
	}
}
