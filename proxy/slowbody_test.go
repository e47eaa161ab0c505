package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
)

// Bodies trickled one byte every two seconds never hold gatekeeper: an
// unauthenticated one is answered 401 before its body is read, an
// authenticated one 408 once limits.body_timeout passes without
// progress; each connection is then closed. 500 of them at once do not
// keep a valid turn from completing.
func TestSlowBodiesAnsweredAndClosed(t *testing.T) {
	e := newEnv(t, envOpts{limits: "limits: {body_timeout: 1s}"})
	u, err := url.Parse(e.gk)
	if err != nil {
		t.Fatal(err)
	}
	const conns = 500
	stop := make(chan struct{})
	var wg sync.WaitGroup
	type answer struct {
		authed bool
		status int
		err    error
	}
	answers := make(chan answer, conns)
	for i := range conns {
		authed := i%2 == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				answers <- answer{authed: authed, err: err}
				return
			}
			defer c.Close()
			key := "vk-nobody"
			if authed {
				key = vkA
			}
			fmt.Fprintf(c, "POST /anthropic/v1/messages HTTP/1.1\r\nHost: gk\r\nx-api-key: %s\r\ncontent-type: application/json\r\nContent-Length: 100000\r\n\r\n{", key)
			// Trickle at most 15 bytes, one every 2 s, until answered.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 15 {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Second):
					}
					if _, err := c.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second)) // a bound, not the assertion
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			a := answer{authed: authed, err: err}
			if err == nil {
				a.status = resp.StatusCode
				resp.Body.Close()
			}
			_ = c.Close()
			<-done
			answers <- a
		}()
	}
	// A valid turn completes meanwhile.
	client := anthropic.NewClient(aoption.WithBaseURL(e.gk+"/anthropic"), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0))
	msg, err := client.Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello among slow bodies"))}})
	if err != nil || len(msg.Content) == 0 {
		t.Fatalf("a valid turn did not complete beside slow bodies: %v", err)
	}
	counts := map[int]int{}
	for range conns {
		a := <-answers
		switch {
		case a.err != nil:
			t.Errorf("slow body (authenticated %v) not answered: %v", a.authed, a.err)
		case a.authed && a.status != http.StatusRequestTimeout, !a.authed && a.status != http.StatusUnauthorized:
			t.Errorf("slow body (authenticated %v) answered %d", a.authed, a.status)
		}
		counts[a.status]++
	}
	close(stop)
	wg.Wait()
	t.Logf("answers by status: %v", counts)
	if n := len(e.mock.Requests()); n != 1 {
		t.Fatalf("provider saw %d requests, want only the valid turn", n)
	}
}
