package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"gatekeeper/admin"
	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/telemetry"
)

var _ admin.Reloader = (*server)(nil)

// ReloadConfig reads the config file again and, when it has no problem,
// makes it the running config of the proxy and the admin API at once;
// otherwise it returns an *admin.ReloadRefused listing every problem, and
// the running config stays. Each reload is a log line and a count in
// gatekeeper_config_reloads_total.
func (s *server) ReloadConfig(ctx context.Context, by string) (admin.Reloaded, error) {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	done, err := s.reload()
	if err != nil {
		var refused *admin.ReloadRefused
		problems := []string{err.Error()}
		if errors.As(err, &refused) {
			problems = refused.Problems
		}
		s.tel.ConfigReloaded(telemetry.ReloadRefused)
		s.log.LogAttrs(ctx, slog.LevelError, "config reload refused; the running config stays",
			slog.String("path", s.path), slog.String("by", by), slog.Any("problems", problems))
		return admin.Reloaded{}, err
	}
	s.tel.ConfigReloaded(telemetry.ReloadApplied)
	s.log.LogAttrs(ctx, slog.LevelInfo, "config reloaded", slog.String("path", s.path), slog.String("by", by),
		slog.Any("changed", done.Changed))
	return done, nil
}

// reload is ReloadConfig's work: read, check everything, then swap.
func (s *server) reload() (admin.Reloaded, error) {
	refuse := func(problems ...string) error { return &admin.ReloadRefused{Path: s.path, Problems: problems} }
	if s.path == "" {
		return admin.Reloaded{}, refuse("this process was started without a config file")
	}
	cfg, err := config.Load(s.path, s.getenv)
	if err != nil {
		if pe, ok := errors.AsType[*config.ParseError](err); ok {
			var problems []string
			for _, p := range pe.Problems {
				if p.Line > 0 {
					problems = append(problems, fmt.Sprintf("line %d: %s", p.Line, p.Msg))
				} else {
					problems = append(problems, p.Msg)
				}
			}
			return admin.Reloaded{}, refuse(problems...)
		}
		return admin.Reloaded{}, refuse(err.Error())
	}
	problems := s.check(cfg)
	gates, gerr := approvals.Compile(cfg.Gates)
	if ce, ok := errors.AsType[*approvals.CompileError](gerr); ok {
		problems = append(problems, ce.Problems...)
	} else if gerr != nil {
		problems = append(problems, gerr.Error())
	}
	if len(problems) > 0 {
		return admin.Reloaded{}, refuse(problems...)
	}
	if s.approvals == nil {
		gates = nil // none, as check made sure
	}
	if err := s.proxy.Reload(cfg, gates); err != nil {
		return admin.Reloaded{}, refuse(err.Error())
	}
	s.admin.SetConfig(cfg)
	running := s.cfg.Swap(cfg)
	return admin.Reloaded{Path: s.path, Changed: cfg.Changed(running)}, nil
}

// check lists every problem of cfg as a reload of the running process:
// its rules broken, the fields only a restart changes, and what this
// process started without (the built-in mock, the approvals service).
// It points cfg's mock providers at the running mock.
func (s *server) check(cfg *config.Config) []string {
	var problems []string
	if ve, ok := errors.AsType[*config.ValidationError](cfg.Validate()); ok {
		for _, fe := range ve.Errors {
			problems = append(problems, fe.Error())
		}
	}
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		if !p.Mock() {
			continue
		}
		if s.mockURL == "" {
			problems = append(problems, fmt.Sprintf("providers[%d].base_url: mock, which starts with the process only; it takes a restart", i))
			continue
		}
		p.BaseURL = s.mockURL
	}
	if s.approvals == nil && len(cfg.Gates) > 0 {
		problems = append(problems, "gates: this process started without gates, so without the approvals service they need; the first gate takes a restart")
	}
	for _, fe := range cfg.Restarts(s.cfg.Load()) {
		problems = append(problems, fe.Error())
	}
	return problems
}

// reloadOnHUP reloads the config on each SIGHUP until ctx ends or the
// returned stop is called, which waits for a reload under way.
func (s *server) reloadOnHUP(ctx context.Context) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_, _ = s.ReloadConfig(ctx, "SIGHUP") // logged and counted
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
