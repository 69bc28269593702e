package main

import (
	"github.com/ferryml/ferry/bench/internal/harness"
)

func feedJobs(e *env) ([]harness.Job, []string)    { return nil, nil }
func ckptJobs(e *env) ([]harness.Job, []string)    { return nil, nil }
func storageJobs(e *env) ([]harness.Job, []string) { return nil, nil }
