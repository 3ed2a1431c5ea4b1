package dist

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Every connection in a job, to the store or between ring neighbours, starts
// with a challenge and response over the job's secret, so the secret itself
// never crosses the wire and a stranger learns nothing useful:
//
//	client → server  greeting (8 bytes), role (1), rank (4), client nonce (16)
//	server → client  server nonce (16), HMAC-SHA256(secret, "S"|greeting|role|rank|nonces)
//	client → server  HMAC-SHA256(secret, "C"|greeting|role|rank|nonces)
//	server → client  'K' when the client's MAC matches
//
// MACs are compared with hmac.Equal (constant time). The server closes the
// connection without a word on any mismatch and logs it.

const (
	greeting     = "fleetds1"
	nonceLen     = 16
	macLen       = sha256.Size
	helloLen     = len(greeting) + 1 + 4 + nonceLen
	handshakeMax = 10 * time.Second // how long a server waits for a client to prove itself

	roleStore byte = 's'
	roleRing  byte = 'r'
)

// errMismatch is what a client sees when the server's proof is wrong.
var errMismatch = errors.New("holds another job secret than this rank")

// errRefused is what a client sees when the server closes on it.
var errRefused = errors.New("refused the connection (is the job secret the same on every rank?)")

func mac(secret []byte, side byte, hello, serverNonce []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte{side})
	h.Write(hello)
	h.Write(serverNonce)
	return h.Sum(nil)
}

// clientHandshake proves this end holds secret, and checks that the server
// does too.
func clientHandshake(c net.Conn, secret []byte, role byte, rank int, deadline time.Time) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	hello := make([]byte, helloLen)
	copy(hello, greeting)
	hello[len(greeting)] = role
	binary.LittleEndian.PutUint32(hello[len(greeting)+1:], uint32(rank))
	if _, err := rand.Read(hello[len(greeting)+5:]); err != nil {
		return err
	}
	if _, err := c.Write(hello); err != nil {
		return err
	}
	reply := make([]byte, nonceLen+macLen)
	if _, err := io.ReadFull(c, reply); err != nil {
		if isClosed(err) {
			return errRefused
		}
		return err
	}
	sn, smac := reply[:nonceLen], reply[nonceLen:]
	// Answer even if the server's proof is wrong, so that it logs a wrong
	// secret rather than a vanished client.
	if _, err := c.Write(mac(secret, 'C', hello, sn)); err != nil {
		return err
	}
	if !hmac.Equal(smac, mac(secret, 'S', hello, sn)) {
		return errMismatch
	}
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil || ok[0] != 'K' {
		return errRefused
	}
	return c.SetDeadline(time.Time{})
}

// serverHandshake checks that the client holds secret and wants role; it
// returns the rank the client claims. The error says why a client was
// refused, for the log.
func serverHandshake(c net.Conn, secret []byte, role byte) (int, error) {
	if err := c.SetDeadline(time.Now().Add(handshakeMax)); err != nil {
		return 0, err
	}
	hello := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hello[:len(greeting)]); err != nil {
		return 0, fmt.Errorf("no greeting: %v", err)
	}
	if string(hello[:len(greeting)]) != greeting {
		return 0, fmt.Errorf("bad greeting %q", hello[:len(greeting)])
	}
	if _, err := io.ReadFull(c, hello[len(greeting):]); err != nil {
		return 0, fmt.Errorf("no greeting: %v", err)
	}
	if hello[len(greeting)] != role {
		return 0, fmt.Errorf("wrong role %q", hello[len(greeting)])
	}
	rank := int(binary.LittleEndian.Uint32(hello[len(greeting)+1:]))
	reply := make([]byte, nonceLen, nonceLen+macLen)
	if _, err := rand.Read(reply); err != nil {
		return 0, err
	}
	reply = append(reply, mac(secret, 'S', hello, reply[:nonceLen])...)
	if _, err := c.Write(reply); err != nil {
		return 0, fmt.Errorf("handshake: %v", err)
	}
	cmac := make([]byte, macLen)
	if _, err := io.ReadFull(c, cmac); err != nil {
		return 0, fmt.Errorf("no proof of the secret: %v", err)
	}
	if !hmac.Equal(cmac, mac(secret, 'C', hello, reply[:nonceLen])) {
		return 0, errors.New("wrong secret")
	}
	if _, err := c.Write([]byte{'K'}); err != nil {
		return 0, err
	}
	return rank, c.SetDeadline(time.Time{})
}
