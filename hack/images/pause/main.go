// Command pause is the sandbox container of every pod on the local node, standing in for the upstream pause
// image that cannot be pulled here. It holds the pod's namespaces open, reaps the zombies of processes that share
// its PID namespace, and exits cleanly on SIGINT or SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set by the build (hack/build-images.sh).
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process of its PID namespace")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, so that none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
