package crowdtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// The requests of a crowd: sent to one base, then the next ones, until
// one answers with something that is not to be sent again.

// answer is a request's answer and the base that gave it.
type answer struct {
	code  int
	raw   []byte
	from  int
	tries int // requests sent before it without an answer
}

// send sends a request on the sale (path after /v1/sales/{sale}) to base
// first%len, then the next ones in turn, every 20 ms, until one answers
// with what Options.Again does not send again. It returns false when the
// deadline passed first (a failure), or the crowd was stopped (without
// Finish). A request is not bound to either: one in flight gets its answer.
func (c *Crowd) send(first int, method, sale, path, body string, hdr map[string]string) (answer, bool) {
	n := len(c.o.Bases)
	first %= n
	for attempt := 0; ; attempt++ {
		i := (first + attempt) % n
		code, raw, err := Do(c.client, method, c.o.Bases[i]+"/v1/sales/"+sale+path, body, hdr)
		if err != nil {
			c.noAnswer.Add(1)
		} else {
			c.mu.Lock()
			c.seen[code]++
			c.mu.Unlock()
			if !c.o.Again(code) {
				return answer{code: code, raw: raw, from: i, tries: attempt}, true
			}
		}
		var stop <-chan struct{}
		if !c.o.Finish {
			stop = c.stop
		}
		select {
		case <-c.deadline.Done():
			if errors.Is(c.deadline.Err(), context.DeadlineExceeded) {
				c.fail("buyer deadline passed")
			}
			return answer{}, false
		case <-stop:
			return answer{}, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sleep pauses d; false when the crowd stopped meanwhile.
func (c *Crowd) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.stop:
		return false
	}
}

func (c *Crowd) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// Buy sends user's buy of one unit of sale to the gateway at base, once,
// with the Idempotency-Key "k-"+user (a crowd's first key), and returns
// the code, the order id of the answer and its body.
func Buy(c *http.Client, base, sale, user string) (code int, orderID, body string, err error) {
	code, raw, err := Do(c, "POST", base+"/v1/sales/"+sale+"/orders", `{"user_id":"`+user+`","quantity":1}`,
		map[string]string{"Idempotency-Key": "k-" + user})
	if err != nil {
		return 0, "", "", err
	}
	var v struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(raw, &v)
	return code, v.OrderID, string(raw), nil
}

// Do sends one request (a JSON body when body is not empty, the headers
// hdr) and returns the answer's code and body.
func Do(c *http.Client, method, url, body string, hdr map[string]string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, raw, err
}
