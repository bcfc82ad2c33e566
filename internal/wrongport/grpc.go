package wrongport

import (
	"bytes"
	"net"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// grpcUnimplemented is gRPC's status code UNIMPLEMENTED.
const grpcUnimplemented = 12

// refuseWindow is how long a gRPC client on the HTTP port is answered
// before its connection is closed; maxRefused, how many of its calls.
const (
	refuseWindow = 5 * time.Second
	maxRefused   = 16
)

// refuseGRPC speaks just enough HTTP/2 to a gRPC client whose preface has
// been read: SETTINGS, then each call it starts ends at once with a
// trailers-only answer carrying status UNIMPLEMENTED and msg; then
// GOAWAY, and the connection is closed. A gRPC client prints the status
// (grpcurl: "Code: Unimplemented, Message: ...") instead of waiting.
func refuseGRPC(c net.Conn, msg string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(refuseWindow))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 16 << 10
	if fr.WriteSettings() != nil {
		return
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"},
		{"grpc-status", strconv.Itoa(grpcUnimplemented)}, {"grpc-message", grpcMessage(msg)}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var last uint32
	for refused := 0; refused < maxRefused; {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			last = f.StreamID
			refused++
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}) != nil {
				return
			}
		}
	}
	fr.WriteGoAway(last, http2.ErrCodeNo, []byte(msg))
}

// grpcMessage percent-encodes msg as the grpc-message header wants
// (every byte outside printable ASCII, and '%').
func grpcMessage(msg string) string {
	var b []byte
	for i := 0; i < len(msg); i++ {
		ch := msg[i]
		if ch < 0x20 || ch > 0x7e || ch == '%' {
			b = append(b, '%', "0123456789ABCDEF"[ch>>4], "0123456789ABCDEF"[ch&15])
			continue
		}
		b = append(b, ch)
	}
	return string(b)
}
