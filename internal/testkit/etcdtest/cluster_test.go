package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestClusterKillLeaderAndRestart: a 3-member cluster keeps serving writes
// while its leader is killed, elects another, and the killed member, once
// restarted on its data directory, has every write made while it was
// down.
func TestClusterKillLeaderAndRestart(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Endpoints) != 3 || len(c.Members) != 3 {
		t.Fatalf("cluster has %d endpoints, %d members; want 3 and 3", len(c.Endpoints), len(c.Members))
	}
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Put(ctx, "/k", "before"); err != nil {
		t.Fatalf("put: %v", err)
	}
	leader := c.Leader(ctx, cl)
	if leader == nil {
		t.Fatal("no member reports a leader")
	}
	pid := leader.PID()
	if pid == 0 {
		t.Fatalf("leader %s has no PID", leader.Name)
	}
	leader.Kill()
	if leader.PID() != 0 {
		t.Fatalf("%s still running after Kill", leader.Name)
	}
	// The client moves to the remaining members. A write in flight when
	// the leader died fails ("request timed out, possibly due to previous
	// leader failure") and is the caller's to retry, as etcd's client does
	// not retry a Put; once a new leader is elected writes succeed.
	var err error
	for range 20 {
		if _, err = cl.Put(ctx, "/k", "during"); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("put with the leader killed: %v", err)
	}
	if nl := c.Leader(ctx, cl); nl == nil || nl == leader {
		t.Fatalf("leader after the kill = %v, want another member", nl)
	}

	leader.Restart(t)
	if leader.PID() == 0 || leader.PID() == pid {
		t.Fatalf("restarted %s has PID %d (was %d)", leader.Name, leader.PID(), pid)
	}
	// Through the restarted member alone: it caught up.
	one, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	resp, err := one.Get(ctx, "/k")
	if err != nil {
		t.Fatalf("get through restarted %s: %v", leader.Name, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "during" {
		t.Fatalf("restarted %s has /k = %v, want the write made while it was down", leader.Name, resp.Kvs)
	}
	members, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 3 {
		t.Fatalf("member list has %d members after the restart, want 3", len(members.Members))
	}
}
