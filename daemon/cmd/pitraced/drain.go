package main

import (
	"errors"
	"sync"

	"perfinsp/daemon/server"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/kmodbackend"
)

// drains hosts the pitrace module's stream drainers (wrap and cont modes):
// the client passes a /dev/pitrace descriptor and the stream file it opened
// itself; the agent drains with them until tracing stops.
type drains struct {
	mu      sync.Mutex
	running int
	perUID  map[int]int
	logf    func(string, ...any)
}

// maxDrainsPerUID caps the drainers one user runs at once (each holds two
// descriptors and a goroutine until its tracing stops).
const maxDrainsPerUID = 4

func registerDrain(s *server.Server, logf func(string, ...any)) {
	d := &drains{logf: logf, perUID: map[int]int{}}
	s.HandleRequest(kmodbackend.OpDrain, d.start)
	s.Busy(func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.running > 0
	})
}

func (d *drains) start(r *server.Request) (any, error) {
	dev, stream := r.File(0), r.File(1)
	if dev == nil || stream == nil {
		if dev != nil {
			dev.Close()
		}
		if stream != nil {
			stream.Close()
		}
		return nil, errors.New("kmod-drain needs two descriptors: /dev/pitrace and the stream file")
	}
	if err := kmodbackend.IsDevice(dev); err != nil {
		dev.Close()
		stream.Close()
		return nil, err
	}
	if err := server.ClientFile(stream, r.Peer); err != nil {
		dev.Close()
		stream.Close()
		return nil, err
	}
	d.mu.Lock()
	if d.perUID[r.UID] >= maxDrainsPerUID {
		d.mu.Unlock()
		dev.Close()
		stream.Close()
		return nil, control.Errorf(control.ErrBusy, "uid %d already runs %d drainers, the most one user may: stop tracing first", r.UID, maxDrainsPerUID)
	}
	d.running++
	d.perUID[r.UID]++
	d.mu.Unlock()
	attached := make(chan error, 1)
	go func() {
		defer func() {
			d.mu.Lock()
			d.running--
			if d.perUID[r.UID]--; d.perUID[r.UID] <= 0 {
				delete(d.perUID, r.UID)
			}
			d.mu.Unlock()
		}()
		err := kmodbackend.Drain(dev, stream, func(err error) { attached <- err })
		if err != nil {
			d.logf("drainer for uid %d: %v", r.UID, err)
		}
	}()
	if err := <-attached; err != nil {
		return nil, err
	}
	d.logf("uid %d pid %d: draining the module's buffers", r.UID, r.PID)
	return nil, nil
}
