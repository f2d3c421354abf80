package sale

import "testing"

// The clock's arithmetic: the head grows by Rate a second from its anchor,
// AdmitAt is the first instant the head reaches a position, and the newer
// of two clocks is the one of the later version.
func TestClock(t *testing.T) {
	c := Clock{Version: 5, At: 10_000, Head: 3, Rate: 4}
	for _, tc := range []struct{ now, head int64 }{{0, 3}, {10_000, 3}, {10_249, 3}, {10_250, 4}, {11_000, 7}, {20_000, 43}} {
		if got := c.HeadAt(tc.now); got != tc.head {
			t.Errorf("HeadAt(%d) = %d, want %d", tc.now, got, tc.head)
		}
	}
	for p := int64(1); p <= 50; p++ {
		at := c.AdmitAt(p)
		if c.HeadAt(at) < p || p > c.Head && c.HeadAt(at-1) >= p {
			t.Errorf("AdmitAt(%d) = %d: head there %d, a ms before %d", p, at, c.HeadAt(at), c.HeadAt(at-1))
		}
	}
	fast := Clock{Version: 1, At: 0, Rate: MaxAdmitPerSecond}
	if got := fast.HeadAt(86_400_000 * 365); got != 86_400_000*365*1000 {
		t.Errorf("a year at the highest rate: head %d", got)
	}
	if Newer(c, Clock{Version: 4}) != c || Newer(Clock{Version: 4}, c) != c {
		t.Error("Newer did not pick the later version")
	}
	r := &Room{Mode: RoomRandom, Prequeue: -1, Joined: 10, Clock: c}
	if r.Admitted(20_000) != 0 {
		t.Error("a random room admits before its pre-queue is sealed")
	}
	r.Prequeue = 10
	if got := r.Admitted(20_000); got != 10 {
		t.Errorf("Admitted = %d, want the 10 joined", got)
	}
}

func TestRoomNames(t *testing.T) {
	for _, name := range []string{"off", "fifo", "random"} {
		m, ok := ParseRoom(name)
		if !ok || RoomName(m) != name {
			t.Errorf("%s: mode %d, %v, named %s", name, m, ok, RoomName(m))
		}
	}
	for _, name := range []string{"", "FIFO", "lifo", "Random"} {
		if _, ok := ParseRoom(name); ok {
			t.Errorf("ParseRoom(%q) accepted", name)
		}
	}
}
