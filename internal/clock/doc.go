// Package clock wakes a goroutine at a deadline with microsecond
// precision. Go's own timers round sub-millisecond sleeps up to a
// millisecond whenever the process is idle (the runtime sleeps in
// epoll_pwait, whose timeout is in milliseconds), which would turn every
// loss probe and pacing gap of the transport into a millisecond.
package clock
