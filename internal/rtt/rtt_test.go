package rtt

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The first sample sets SRTT and half of it as RTTVAR; later ones move
// them by an eighth and a quarter of the difference (RFC 6298, 2.2-2.3).
func TestEstimatorFollowsRFC6298(t *testing.T) {
	var e Estimator
	assert.Zero(t, e.Timeout(0), "no sample: no timeout")
	e.Sample(0)
	e.Sample(-5)
	assert.Equal(t, Estimator{}, e, "non-positive samples are ignored")

	e.Sample(800)
	assert.Equal(t, Estimator{SRTT: 800, RTTVar: 400, MinRTT: 800, Latest: 800}, e)
	assert.Equal(t, int64(800+1600), e.Timeout(0))

	e.Sample(400)
	assert.Equal(t, Estimator{SRTT: 750, RTTVar: 400, MinRTT: 400, Latest: 400}, e, "RTTVAR += (400-400)/4, SRTT += (400-800)/8")
	e.Sample(1550)
	assert.Equal(t, Estimator{SRTT: 850, RTTVar: 500, MinRTT: 400, Latest: 1550}, e)
	assert.Equal(t, int64(850+5000), e.Timeout(5000), "the floor on the variation term")
}
