package keys

import (
	"net/http"
	"sync/atomic"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/ratelimit"
)

// Pool is a provider's keys as the scheduler sees them: by id
// "provider/keyname", never by secret.
type Pool struct {
	provider string
	api      string
	keys     []ratelimit.Key
	secrets  map[string]string // key id → the provider key
	// conf finds a provider key's config by the key itself.
	conf    map[string]*config.ProviderKey
	order   []string // the provider keys, in config order, for Pick
	next    atomic.Uint64
	limited bool // some key has a limit: turns go through the scheduler
}

// NewPool is the pool of provider p's keys.
func NewPool(p *config.Provider) *Pool {
	kp := &Pool{provider: p.Name, api: p.API, secrets: make(map[string]string, len(p.Keys)),
		conf: make(map[string]*config.ProviderKey, len(p.Keys))}
	for i := range p.Keys {
		k := &p.Keys[i]
		id := p.Name + "/" + k.Name
		lim := ratelimit.Limits{RPM: k.RPM, InputTPM: k.InputTPM, OutputTPM: k.OutputTPM,
			RPMBurst: k.RPMBurst, InputBurst: k.InputTPMBurst, OutputBurst: k.OutputTPMBurst}
		kp.keys = append(kp.keys, ratelimit.Key{ID: id, Limits: lim})
		kp.secrets[id] = k.Key
		kp.conf[k.Key] = k
		kp.order = append(kp.order, k.Key)
		kp.limited = kp.limited || lim != ratelimit.Limits{}
	}
	return kp
}

// Limited reports whether some key of the pool has a limit: its calls go
// through the scheduler.
func (p *Pool) Limited() bool { return p.limited }

// Secret is the provider key of key id.
func (p *Pool) Secret(id string) string { return p.secrets[id] }

// Pick takes the pool's keys in turn, for requests the rate-limit
// scheduler did not place on a key (pass-through requests, pools without
// limits); "" for a pool without keys, which only tenants that send their
// own credentials use (config.Validate).
func (p *Pool) Pick() string {
	if len(p.order) == 0 {
		return ""
	}
	n := p.next.Add(1)
	return p.order[int(n-1)%len(p.order)]
}

// SetKey puts key, one of the pool's, in the provider's auth header (and
// the key's organization and project headers, when it has them).
func (p *Pool) SetKey(h http.Header, key string) {
	wire.SetProviderKey(h, p.api, key, p.conf[key])
}
