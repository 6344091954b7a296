package agent

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image/png"
	"time"
)

// A recording of the screen while a cell runs, returned as an animated PNG.
// Each frame is PNG-compressed as soon as it is grabbed, and an unchanged
// screen only lengthens the previous frame, so memory stays small; the APNG
// container is then a few chunks around those compressed frames.

const (
	maxRecordFrames = 600
	maxRecordBytes  = 64 << 20
)

type recorder struct {
	x      *display
	period time.Duration
	stop   chan struct{}
	done   chan struct{}

	frames [][]byte // each frame's zlib stream (its IDAT data)
	ticks  []int    // how many periods each frame stays
	size   int
	last   []byte // the previous frame's pixels
}

func startRecording(x *display, fps int) *recorder {
	r := &recorder{x: x, period: time.Second / time.Duration(fps), stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		r.grab()
		select {
		case <-r.stop:
			r.grab() // the screen as the cell left it
			return
		case <-t.C:
		}
	}
}

func (r *recorder) grab() {
	img, err := r.x.grab(r.x.bounds())
	if err != nil {
		return
	}
	if r.last != nil && bytes.Equal(img.Pix, r.last) {
		r.ticks[len(r.ticks)-1]++
		return
	}
	if len(r.frames) >= maxRecordFrames || r.size >= maxRecordBytes {
		r.ticks[len(r.ticks)-1]++ // full: the last frame stands for the rest
		return
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img); err != nil {
		return
	}
	data := idat(buf.Bytes())
	r.frames, r.ticks, r.last = append(r.frames, data), append(r.ticks, 1), img.Pix
	r.size += len(data)
}

// finish stops recording and returns the APNG.
func (r *recorder) finish() []byte {
	close(r.stop)
	<-r.done
	if len(r.frames) == 0 {
		return nil
	}
	w, h := r.x.width, r.x.height
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8-bit RGB, as image/png writes an opaque RGBA image
	pngChunk(&out, "IHDR", ihdr)
	actl := make([]byte, 8)
	binary.BigEndian.PutUint32(actl[0:], uint32(len(r.frames)))
	binary.BigEndian.PutUint32(actl[4:], 1) // play once
	pngChunk(&out, "acTL", actl)
	seq := uint32(0)
	ms := uint16(r.period.Milliseconds())
	for i, data := range r.frames {
		fctl := make([]byte, 26)
		binary.BigEndian.PutUint32(fctl[0:], seq)
		binary.BigEndian.PutUint32(fctl[4:], uint32(w))
		binary.BigEndian.PutUint32(fctl[8:], uint32(h))
		binary.BigEndian.PutUint16(fctl[20:], ms*uint16(min(r.ticks[i], 65535/int(max(ms, 1)))))
		binary.BigEndian.PutUint16(fctl[22:], 1000) // delay in ms
		seq++
		pngChunk(&out, "fcTL", fctl)
		if i == 0 {
			pngChunk(&out, "IDAT", data) // the first frame is the plain PNG's image too
			continue
		}
		fdat := make([]byte, 4, 4+len(data))
		binary.BigEndian.PutUint32(fdat, seq)
		seq++
		pngChunk(&out, "fdAT", append(fdat, data...))
	}
	pngChunk(&out, "IEND", nil)
	return out.Bytes()
}

// idat returns the concatenated IDAT data of an encoded PNG.
func idat(p []byte) []byte {
	var data []byte
	for i := 8; i+8 <= len(p); {
		n := int(binary.BigEndian.Uint32(p[i:]))
		typ := string(p[i+4 : i+8])
		if typ == "IDAT" && i+8+n <= len(p) {
			data = append(data, p[i+8:i+8+n]...)
		}
		i += 12 + n
	}
	return data
}

func pngChunk(out *bytes.Buffer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	out.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	out.WriteString(typ)
	out.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	out.Write(n[:])
}
