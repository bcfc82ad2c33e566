package checker

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/anishathalye/porcupine"
)

// linearizeGroups runs porcupine on every group, a few at a time, each
// with its own time budget.
func linearizeGroups(cfg Config, gs []*group) []porcupine.CheckResult {
	verdicts := make([]porcupine.CheckResult, len(gs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			verdicts[i] = porcupine.CheckOperationsTimeout(g.porcupineModel(), groupHistory(g.ops), cfg.timeout())
		})
	}
	wg.Wait()
	return verdicts
}

// groupHistory turns one group's ops into porcupine operations. Unknown peeks
// are dropped: they change nothing and promise nothing. An unknown hit is
// linearized at its invocation, where the model only notes that it may
// count from then on (see state); that is the earliest it could have taken
// effect, and noting it early never rules out anything, so a zero-length
// interval loses nothing and spares porcupine a search. Workers are
// numbered from 0, as the visualization wants.
func groupHistory(ops []Op) []porcupine.Operation {
	var workers []int
	for _, op := range ops {
		workers = append(workers, op.Client)
	}
	slices.Sort(workers)
	workers = slices.Compact(workers)

	hist := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		ret := op.Return
		if op.Outcome == OutcomeUnknown {
			if op.Kind == KindPeek {
				continue
			}
			ret = op.Invoke
		}
		row, _ := slices.BinarySearch(workers, op.Client)
		hist = append(hist, porcupine.Operation{
			ClientId: row,
			Input:    op,
			Call:     op.Invoke,
			Return:   ret,
			Metadata: fmt.Sprintf("op %d, worker %d, node %s", op.ID, op.Client, op.Node),
		})
	}
	return hist
}
