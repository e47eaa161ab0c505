package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// Reloader loads the config file again and applies it whole, or refuses
// it whole and keeps the running config. by names who asked (an admin
// token's name).
type Reloader interface {
	ReloadConfig(ctx context.Context, by string) (Reloaded, error)
}

// Reloaded is an applied reload: the file read and the top-level config
// sections it changed.
type Reloaded struct {
	Path    string   `json:"path"`
	Changed []string `json:"changed"`
}

// ReloadRefused is a reload refused: every problem of the file, each on
// its own, and the running config kept.
type ReloadRefused struct {
	Path     string
	Problems []string
}

func (e *ReloadRefused) Error() string {
	return "config reload refused: " + strings.Join(e.Problems, "; ")
}

// WithReloader serves POST /admin/v1/config/reload (operator), which asks
// r to reload the config.
func WithReloader(r Reloader) Option {
	return func(a *API) { a.reloader = r }
}

// reload answers {"reloaded": true, "path", "changed"} when the config
// was applied, and 422 {"reloaded": false, "error", "problems"} with every
// problem when it was refused.
func (a *API) reload(w http.ResponseWriter, r *http.Request, c caller) error {
	done, err := a.reloader.ReloadConfig(r.Context(), c.name)
	var refused *ReloadRefused
	switch {
	case errors.As(err, &refused):
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{
			"reloaded": false,
			"path":     refused.Path,
			"error":    map[string]string{"type": "invalid_config", "message": "the config file has problems; the running config stays"},
			"problems": refused.Problems,
		})
		return nil
	case err != nil:
		return err
	}
	if done.Changed == nil {
		done.Changed = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"reloaded": true, "path": done.Path, "changed": done.Changed})
	return nil
}
