package broker

import (
	"os"
	"strconv"
	"time"
)

// InstanceName returns a name for one process's client: host-pid-random,
// falling back to role when the host name is unknown. It names the RabbitMQ
// connection and consumer tags, and the relay's consumer in the outbox
// groups, so it must differ between live processes; the random part keeps
// a restarted process (same host, reused pid) from taking a dead one's name.
func InstanceName(role string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = role
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(time.Now().UnixNano())&0xffffff, 36)
}
