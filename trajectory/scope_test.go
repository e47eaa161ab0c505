package trajectory

import "testing"

func TestTenantScoped(t *testing.T) {
	for _, tc := range []struct{ id, tenant, scoped string }{
		{"run-42", "team-b", "run-42@team-b"},
		{"run-42/3f9a", "team-b", "run-42@team-b/3f9a"},
		{"run-42/3f9a/~2", "t", "run-42@t/3f9a/~2"},
	} {
		if got := TenantScoped(tc.id, tc.tenant); got != tc.scoped {
			t.Errorf("TenantScoped(%q, %q) = %q, want %q", tc.id, tc.tenant, got, tc.scoped)
		}
		if got := Unscoped(tc.scoped, tc.tenant); got != tc.id {
			t.Errorf("Unscoped(%q, %q) = %q, want %q", tc.scoped, tc.tenant, got, tc.id)
		}
		if got := Unscoped(tc.id, tc.tenant); got != tc.id {
			t.Errorf("Unscoped of a plain id %q = %q", tc.id, got)
		}
		if ValidID(tc.scoped) {
			t.Errorf("%q, a scoped id, is one an agent could name", tc.scoped)
		}
	}
	if got := Unscoped("run-42@team-a", "team-b"); got != "run-42@team-a" {
		t.Errorf("another tenant's scope was removed: %q", got)
	}
}
