package config

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"

	"github.com/fleetml/fleet/data"
)

// hashTokens adds a token sequence to h: its length, then every id as 4
// little-endian bytes.
func hashTokens(h hash.Hash, t data.Tokens) {
	n := t.Len()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(n))
	h.Write(hdr[:])
	const chunk = 1 << 16
	ids := make([]int32, chunk)
	buf := make([]byte, 4*chunk)
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		t.Read(ids[:k], off)
		for i, id := range ids[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
		h.Write(buf[:4*k])
	}
}

// TokensIdentity is the identity of token data: the sum of its train and
// val ids.
func TokensIdentity(train, val data.Tokens, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet token data v1\n"))
	hashTokens(h, train)
	hashTokens(h, val)
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: desc}
}

// TextIdentity is the identity of text data: the sum of its bytes.
func TextIdentity(text, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet text v1\n"))
	h.Write([]byte(text))
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: desc}
}

// PreparedIdentity is the identity of prepared data: the sum of what its
// manifest says of the tokens (vocabulary, separator, and each split's
// shards by checksum and count), not of where the inputs were.
func PreparedIdentity(m *data.Manifest, desc string) Identity {
	type shard struct {
		Tokens int64  `json:"tokens"`
		SHA256 string `json:"sha256"`
	}
	var c struct {
		Vocab int     `json:"vocab"`
		EOT   *int32  `json:"eot"`
		Train []shard `json:"train"`
		Val   []shard `json:"val"`
	}
	c.Vocab, c.EOT = m.VocabSize, m.EOT
	for _, f := range m.Train.Shards {
		c.Train = append(c.Train, shard{f.Tokens, f.SHA256})
	}
	for _, f := range m.Val.Shards {
		c.Val = append(c.Val, shard{f.Tokens, f.SHA256})
	}
	b, _ := json.Marshal(c)
	h := sha256.Sum256(append([]byte("fleet prepared v1\n"), b...))
	return Identity{SHA256: hex.EncodeToString(h[:]), Desc: desc}
}

// TokenizerIdentity is the identity of a tokenizer: the sum of its whole
// vocabulary, every id's text in order (not only its size).
func TokenizerIdentity(tok data.Tokenizer, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet vocabulary v1\n"))
	var n [8]byte
	one := make([]int32, 1)
	for id := 0; id < tok.Size(); id++ {
		one[0] = int32(id)
		s := tok.Decode(one)
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: fmt.Sprintf("%s, %d symbols", desc, tok.Size())}
}
