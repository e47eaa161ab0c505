package admit

import (
	"context"

	"gatekeeper/trajectory"
)

type personKey struct{}

// WithPerson is ctx carrying the person a request was admitted as, whom a
// run the request starts is attributed to (Records.Root). It is the
// request's caller, as the context carries a request's credentials, so
// the admission steps between need not pass it along.
func WithPerson(ctx context.Context, p *trajectory.Person) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, personKey{}, p)
}

// personOf is the person ctx carries (WithPerson), a copy the record
// owns; nil for none.
func personOf(ctx context.Context) *trajectory.Person {
	p, _ := ctx.Value(personKey{}).(*trajectory.Person)
	return p.Clone()
}
