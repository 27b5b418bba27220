package traceevent

import (
	"testing"

	"perfinsp/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
