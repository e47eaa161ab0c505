package wire

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/internal/testidp"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/signin"
	"gatekeeper/store/memory"
)

var eng = testidp.User{Subject: "ada", Name: "Ada", Email: "ada@example.com", Groups: []string{"eng"}}

// peopleKeyring is a keyring of one virtual key (tenant team-a) that also
// admits the test provider's people in group eng as team-b, and a token of
// ada's.
func peopleKeyring(t testing.TB) (*Keyring, string) {
	t.Helper()
	idp, err := testidp.Start(testidp.Options{}, eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := idp.Token(ctx, "ada")
	if err != nil {
		t.Fatal(err)
	}
	tenants := []config.Tenant{{Name: "team-a", Keys: []string{"vk-team-a"}}, {Name: "team-b"}}
	kr := NewKeyring(tenants)
	kr.AdmitPeople(identity.New(config.Identity{Issuer: idp.Issuer(), ClientID: testidp.ClientID, GroupsClaim: testidp.GroupsClaim,
		Groups: []config.GroupTenant{{Group: "eng", Tenant: "team-b"}}}, nil, nil), tenants, memory.NewRevocations(nil))
	return kr, tok.AccessToken
}

func TestResolve(t *testing.T) {
	kr, token := peopleKeyring(t)
	ctx := context.Background()
	tn, _, p, err := kr.Resolve(ctx, "vk-team-a")
	if err != nil || tn == nil || tn.Name != "team-a" || p != nil {
		t.Fatalf("virtual key: %v %v %+v", tn, err, p)
	}
	tn, h, p, err := kr.Resolve(ctx, token)
	if err != nil || tn == nil || tn.Name != "team-b" || p == nil || p.Subject != "ada" {
		t.Fatalf("token: %v %v %+v", tn, err, p)
	}
	if h != identity.KeyHash(kr.people.verifier.Config().Issuer, "ada") {
		t.Error("a person's sessions are not scoped to the person")
	}
	if tn, _, p, err := kr.Resolve(ctx, "vk-nope"); tn != nil || p != nil || err != nil {
		t.Fatalf("unknown key: %v %+v %v (the caller refuses a nil tenant)", tn, p, err)
	}
	var ae *apierr.Error
	if _, _, _, err := kr.Resolve(ctx, token[:len(token)-3]+"xyz"); !errors.As(err, &ae) || ae.Code != 401 || strings.Contains(ae.Msg, token) {
		t.Fatalf("tampered token: %v", err)
	}

	// A token revoked at the gateway sign-in is refused, finally, while
	// its signature is still good; the person's other tokens are not.
	if err := kr.people.revoked.(*memory.Revocations).Revoke(ctx, signin.TokenKey(token), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if tn, _, p, err := kr.Resolve(ctx, token); !errors.As(err, &ae) || ae.Code != 401 || !ae.NoRetry || tn != nil || p != nil {
		t.Fatalf("revoked token: %v %v %+v", tn, err, p)
	}
}

// FuzzResolve: whatever key an agent sends, Resolve answers a tenant, a
// nil tenant or a refusal in the agent's terms, never a panic; and no key
// but the provider's own signature names a person: whatever is admitted
// is ada in team-b.
func FuzzResolve(f *testing.F) {
	kr, token := peopleKeyring(f)
	parts := strings.SplitN(token, ".", 3)
	for _, s := range []string{token, "vk-team-a", "", "eyJ", parts[0] + "." + parts[1] + ".", parts[0] + ".e30." + parts[2],
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiJldmUifQ.", token + "a", strings.ToUpper(token)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tn, _, p, err := kr.Resolve(ctx, key)
		if err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || !slices.Contains([]int{401, 403, 503}, ae.Code) || tn != nil || p != nil {
				t.Fatalf("refusal %v with tenant %v person %+v", err, tn, p)
			}
			return
		}
		switch {
		case tn == nil:
		case p == nil:
			if key != "vk-team-a" || tn.Name != "team-a" {
				t.Fatalf("key %q admitted as %s", key, tn.Name)
			}
		case p.Subject != "ada" || tn.Name != "team-b" || !slices.Equal(p.Groups, eng.Groups):
			t.Fatalf("key %q admitted as %+v in %s", key, p, tn.Name)
		}
	})
}
