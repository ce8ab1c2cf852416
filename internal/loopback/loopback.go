// Package loopback tells the host names that reach this machine only.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether host (a request's Host, or a listen address's host,
// with or without a port) names this machine only: localhost or a loopback
// address, with or without a port.
func Host(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = strings.Trim(host, "[]")
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
