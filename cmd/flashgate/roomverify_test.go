package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// flashgate room verify reproduces every place of a random room from the
// proof the gateway publishes; one bit of the seed changed moves places,
// and a seed that is not the committed one is refused.
func TestRoomVerify(t *testing.T) {
	g := soloGateway(t)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(method, path, body string, hdr ...string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+g.public+path, strings.NewReader(body))
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v %v", method, path, res.StatusCode, v, err)
		}
		return v
	}
	const n = 30
	start := time.Now().Add(3 * time.Second)
	putSale(t, g, "lottery", `{"stock":100,"waiting_room":"random","admit_per_second":1000,"starts_at":"`+start.UTC().Format(time.RFC3339Nano)+`"}`)
	commitment := get("GET", "/v1/sales/lottery/queue/proof", "")["commitment"].(string)
	tickets := make([]string, n)
	for i := range tickets {
		tickets[i] = get("POST", "/v1/sales/lottery/queue", fmt.Sprintf(`{"user_id":"v%d"}`, i))["ticket"].(string)
	}
	if time.Now().After(start) {
		t.Fatalf("the pre-queue was not joined before the start")
	}
	time.Sleep(time.Until(start))
	var proof map[string]any
	for deadline := time.Now().Add(10 * time.Second); proof["seed"] == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no seed after the start: %v", proof)
		}
		proof = get("GET", "/v1/sales/lottery/queue/proof", "")
	}
	seed, prequeue := proof["seed"].(string), fmt.Sprint(proof["prequeue"])
	// The seed one bit off: the last hex digit's low bit (0↔1, a↔b, …).
	const digits = "0123456789abcdef"
	last := strings.IndexByte(digits, seed[len(seed)-1])
	flipped := seed[:len(seed)-1] + string(digits[last^1])
	moved := 0
	for _, tk := range tickets {
		view := get("GET", "/v1/sales/lottery/queue", "", "Flashgate-Ticket", tk)
		join, place := fmt.Sprint(view["join"]), fmt.Sprint(view["position"])
		out, code := runFlashgate(t, cleanEnv(), "room", "verify", "--sale", "lottery", "--seed", seed, "--prequeue", prequeue, "--join", join, "--commitment", commitment)
		if code != 0 || strings.TrimSpace(out) != place {
			t.Errorf("join %s: verify says %q (exit %d), the gateway %s", join, out, code, place)
		}
		if out, _ := runFlashgate(t, cleanEnv(), "room", "verify", "--sale", "lottery", "--seed", flipped, "--prequeue", prequeue, "--join", join); strings.TrimSpace(out) != place {
			moved++
		}
	}
	if moved == 0 {
		t.Errorf("a seed one bit off gives every place of the %d", n)
	}
	if out, code := runFlashgate(t, cleanEnv(), "room", "verify", "--sale", "lottery", "--seed", flipped, "--prequeue", prequeue, "--commitment", commitment); code == 0 || !strings.Contains(out, "not the one committed to") {
		t.Errorf("a seed that is not the committed one: exit %d, %q", code, out)
	}
	if _, code := runFlashgate(t, cleanEnv(), "room", "verify", "--sale", "lottery", "--seed", "xyz", "--prequeue", prequeue); code != 2 {
		t.Errorf("a malformed seed: exit %d, want 2", code)
	}
}
