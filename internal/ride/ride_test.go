package ride

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

type counted struct{ n int }

func (c *counted) Queue(context.Context, any, goredis.Pipeliner) bool { c.n++; return true }

func TestTakeOnce(t *testing.T) {
	if Take(context.Background()) != nil {
		t.Fatal("a context without a rider gave one")
	}
	r := &counted{}
	ctx := With(context.Background(), r)
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	if got := Take(derived); got != r {
		t.Fatalf("Take = %v, want the rider", got)
	}
	if Take(ctx) != nil || Take(derived) != nil {
		t.Fatal("the rider was handed out twice")
	}
	other := With(context.Background(), r)
	if Take(other) != r {
		t.Fatal("a second context's rider was not handed out")
	}
}

type refusing struct{ n int }

func (r *refusing) Queue(context.Context, any, goredis.Pipeliner) bool { r.n++; return false }
