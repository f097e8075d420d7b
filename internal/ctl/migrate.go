package ctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// migrateTimeout bounds an export or import: each reads or writes every
// object, one request at a time on the Kubernetes datastore.
const migrateTimeout = 30 * time.Minute

// datastoreCommand is `calicoctl datastore migrate ...`: Calico's way of
// moving a cluster from etcd to the Kubernetes datastore (lock, export,
// import, unlock), which works here in both directions.
func datastoreCommand() *cli.Command {
	// NormalizeArgs puts a verb's flags right after the verb, before
	// "migrate import", so `datastore` must know -f to parse it; import
	// reads it wherever it was set.
	hiddenFile := &cli.StringFlag{Name: "filename", Aliases: []string{"f"}, Hidden: true}
	return &cli.Command{
		Name:            "datastore",
		Usage:           "datastore operations: migrate between etcd and the Kubernetes datastore",
		Flags:           []cli.Flag{hiddenFile},
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:            "migrate",
			Usage:           "lock the datastore, export it, import it into the other datastore type, unlock",
			HideHelpCommand: true,
			Subcommands: []*cli.Command{
				{
					Name:   "lock",
					Usage:  "set ClusterInformation datastoreReady=false: the dataplane, the CNI plugin and IPAM GC pause",
					Action: withSession(cmdMigrateLock),
				},
				{
					Name:   "export",
					Usage:  "write the (locked) datastore's resources, cluster information and IPAM data to stdout",
					Action: withSessionTimeout(migrateTimeout, cmdMigrateExport),
				},
				{
					Name:  "import",
					Usage: "write an export into the configured (empty) datastore, which stays locked",
					Flags: []cli.Flag{&cli.StringFlag{Name: "filename", Aliases: []string{"f"}, Usage: "the export, or - for stdin"}},
					Action: withSessionTimeout(migrateTimeout, func(s *session) error {
						return cmdMigrateImport(s, ipamString(s.c, "filename"))
					}),
				},
				{
					Name:   "unlock",
					Usage:  "set ClusterInformation datastoreReady=true: Calico resources take effect again",
					Action: withSession(cmdMigrateUnlock),
				},
			},
		}},
	}
}

func cmdMigrateLock(s *session) error {
	if err := ensureClusterInfo(s.ctx, s.store); err != nil {
		return fmt.Errorf("unable to initialize cluster information for the datastore migration: %w", err)
	}
	if err := setDatastoreReady(s.ctx, s.store, false); err != nil {
		return fmt.Errorf("error updating ClusterInformation for locking: %w", err)
	}
	fmt.Fprint(s.out, "Datastore locked.\n")
	return nil
}

func cmdMigrateUnlock(s *session) error {
	if err := setDatastoreReady(s.ctx, s.store, true); err != nil {
		return fmt.Errorf("error updating ClusterInformation for unlocking: %w", err)
	}
	fmt.Fprint(s.out, "Datastore unlocked.\n")
	return nil
}

// cmdMigrateExport writes the file calicoctl's export writes. Unlike
// calicoctl it also exports the Kubernetes datastore (with its computed
// endpoints and profiles), so that a cluster can go back to etcd.
func cmdMigrateExport(s *session) error {
	ci, err := getClusterInfo(s.ctx, s.store)
	if err != nil && !errors.Is(err, datastore.ErrNotFound) {
		return fmt.Errorf("error while checking if datastore was locked: %w", err)
	}
	if ci == nil || !isLocked(ci) {
		return errors.New("datastore is not locked. Run the `calicoctl datastore migrate lock` command in order to begin migration")
	}
	src := s.store.Type()
	kinds := migrationKinds
	if src == datastore.TypeKubernetes {
		kinds = slices.Concat(migrationKinds, computedKinds)
	}
	var lists []kindList
	for _, kind := range kinds {
		objs, rev, err := s.store.List(s.ctx, kind, "")
		if err != nil {
			return fmt.Errorf("export %s: %w", kind, err)
		}
		lists = append(lists, kindList{kind: kind, revision: rev, items: objs})
	}
	lists, renames, err := exportLists(src, lists)
	if err != nil {
		return err
	}
	data, err := ipam.ReadExport(s.ctx, s.store.IPAM())
	if err != nil {
		return err
	}
	if err := data.RenameNodes(renames); err != nil {
		return fmt.Errorf("rename nodes in IPAM data: %w", err)
	}
	ci.Kind, ci.APIVersion = "ClusterInformation", api.GroupVersion
	f := &migrationFile{lists: lists, clusterInfo: ci, ipam: data}
	return f.write(s.out)
}

// cmdMigrateImport is calicoctl's import: refuse a target that already
// holds Calico data, lock it, apply the resources, carry the cluster's
// GUID and version over, create the IPAM keys. The target stays locked
// until `unlock`.
func cmdMigrateImport(s *session, filename string) error {
	if filename == "" {
		return errors.New("give the export to import with -f FILE (or -f - for stdin)")
	}
	var data []byte
	var err error
	if filename == "-" {
		data, err = io.ReadAll(s.stdin)
	} else {
		data, err = os.ReadFile(filename)
	}
	if err != nil {
		return fmt.Errorf("error while reading migration file: %w", err)
	}
	file, err := parseMigrationFile(displayName(filename), data)
	if err != nil {
		return fmt.Errorf("error while reading migration file: %w", err)
	}
	objs, err := prepare(file.docs, "", true)
	if err != nil {
		return fmt.Errorf("error while reading migration file: %w", err)
	}
	found, err := findExisting(s.ctx, s.store)
	if err != nil {
		return fmt.Errorf("check that the datastore is empty: %w", err)
	}
	if found != "" {
		how := "delete every Calico custom resource (or the Calico CRDs and apply deploy/crds.yaml again)"
		if s.store.Type() == datastore.TypeEtcd {
			how = "delete every key under /calico/ in etcd"
		}
		return fmt.Errorf("datastore already has Calico resources: found existing %s. Clear out all Calico resources first: %s", found, how)
	}
	if err := ensureClusterInfo(s.ctx, s.store); err != nil {
		return fmt.Errorf("unable to initialize cluster information for the datastore migration: %w", err)
	}
	// EnsureInitialized leaves a new ClusterInformation unlocked: lock it
	// before anything is written.
	if err := setDatastoreReady(s.ctx, s.store, false); err != nil {
		return fmt.Errorf("error while attempting to lock the datastore for import: %w", err)
	}

	if err := s.importResources(objs); err != nil {
		return fmt.Errorf("failed to import v3 resources: %w", err)
	}
	if err := copyClusterIdentity(s.ctx, s.store, file.clusterInfo); err != nil {
		return fmt.Errorf("failed to update cluster information: %w", err)
	}

	fmt.Fprint(s.out, "Importing IPAM resources\n")
	total := file.ipam.Len()
	n, err := file.ipam.Import(s.ctx, s.store.IPAM())
	switch {
	case err != nil && n > 0:
		fmt.Fprintf(s.out, "Partial success: applied the first %d out of %d resources:\n", n, total)
		return fmt.Errorf("hit error(s): %w", err)
	case err != nil:
		return fmt.Errorf("failed to import any IPAM resources: %w", err)
	case total == 0:
		fmt.Fprint(s.out, "No IPAM resources in the file\n")
	default:
		fmt.Fprintf(s.out, "Successfully applied %d IPAM resource(s)\n", n)
	}
	fmt.Fprint(s.out, "Datastore information successfully imported. Please refer to the datastore migration documentation for next steps.\n")
	return nil
}

// importResources applies each resource in file order. On the Kubernetes
// datastore a Node whose Kubernetes Node does not exist is skipped with a
// warning, as calicoctl does (Calico Nodes there are Kubernetes Nodes),
// and computed kinds are skipped (Kubernetes computes them from its own
// objects); mirrors of Kubernetes policies are skipped on both.
func (s *session) importResources(objs []api.Object) error {
	kdd := s.store.Type() == datastore.TypeKubernetes
	var applied []api.Object
	var failed []string
	skipped := map[string]int{}
	for _, o := range objs {
		kind := o.Type().Kind
		mirror := (kind == "NetworkPolicy" || kind == "GlobalNetworkPolicy") && !occupying(o)
		if mirror || (kdd && slices.Contains(computedKinds, kind)) {
			skipped[kind]++
			continue
		}
		if kcc, ok := o.(*api.KubeControllersConfiguration); ok && kdd {
			if n := kcc.Spec.Controllers.Node; n != nil && n.SyncLabels == "Disabled" {
				// Refused on the Kubernetes datastore, where a Calico
				// Node's labels are its Kubernetes Node's anyway.
				n.SyncLabels = "Enabled"
				fmt.Fprintf(s.out, "KubeControllersConfiguration %s: node syncLabels Disabled becomes Enabled (Calico Nodes take their labels from Kubernetes Nodes on this datastore)\n", kcc.Name)
			}
		}
		_, err := s.store.Apply(s.ctx, o)
		switch {
		case err == nil:
			applied = append(applied, o)
		case kdd && kind == "Node" && (errors.Is(err, datastore.ErrNotSupported) || errors.Is(err, datastore.ErrNotFound)):
			fmt.Fprintf(s.out, "[WARNING] Attempted to import node %s that references a nonexistent Kubernetes node. Skipping that node. Non-Kubernetes nodes are not supported in the Kubernetes datastore and will be skipped.\n", o.Meta().Name)
		case kdd && o.Meta().Namespace != "" && errors.Is(err, datastore.ErrNotFound):
			// The API server refuses an object in a namespace it does not have.
			failed = append(failed, fmt.Sprintf("%v (does the Kubernetes namespace %s exist?)", err, o.Meta().Namespace))
		default:
			failed = append(failed, err.Error())
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(skipped)) {
		fmt.Fprintf(s.out, "Skipped %d %s resource(s): on this datastore they are made from Kubernetes objects\n", skipped[kind], kind)
	}
	s.reportSuccess("applied", applied)
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d resources were not applied:\n  %s", len(failed), len(objs), strings.Join(failed, "\n  "))
	}
	return nil
}

// findExisting names the first Calico resource or IPAM key the target
// already holds ("" if none). Nodes are not looked at (on the Kubernetes
// datastore they are the cluster's Kubernetes Nodes), nor is the
// ClusterInformation (it carries no user data and the import overwrites
// its identity).
func findExisting(ctx context.Context, store datastore.Store) (string, error) {
	for _, kind := range migrationKinds {
		if kind == "Node" {
			continue
		}
		objs, _, err := store.List(ctx, kind, "")
		if err != nil {
			return "", fmt.Errorf("list %s: %w", kind, err)
		}
		for _, o := range objs {
			if occupying(o) {
				return fmt.Sprintf("Calico %s resource %s", kind, o.Meta().Name), nil
			}
		}
	}
	kvs, _, err := store.IPAM().List(ctx, ipam.Prefix, true)
	if err != nil {
		return "", fmt.Errorf("list IPAM data: %w", err)
	}
	if len(kvs) > 0 {
		return fmt.Sprintf("IPAM resources (%s)", kvs[0].Key), nil
	}
	return "", nil
}

// getClusterInfo reads the ClusterInformation "default".
func getClusterInfo(ctx context.Context, store datastore.Store) (*api.ClusterInformation, error) {
	obj, err := store.Get(ctx, "ClusterInformation", "", "default")
	if err != nil {
		return nil, fmt.Errorf("error retrieving ClusterInformation: %w", err)
	}
	ci, ok := obj.(*api.ClusterInformation)
	if !ok {
		return nil, fmt.Errorf("ClusterInformation default is a %T", obj)
	}
	return ci, nil
}

// isLocked: datastoreReady is explicitly false.
func isLocked(ci *api.ClusterInformation) bool {
	return ci.Spec.DatastoreReady != nil && !*ci.Spec.DatastoreReady
}

// casAttempts bounds the retries of a ClusterInformation write that lost a
// race with another writer (an agent's start-up).
const casAttempts = 5

// ensureClusterInfo is clientv3's EnsureInitialized as calicoctl calls it
// (no version, no cluster type): create the ClusterInformation with a new
// GUID and datastoreReady=true if there is none; otherwise fill in a
// missing GUID or ready flag. On the Kubernetes datastore the cluster type
// includes "kdd".
func ensureClusterInfo(ctx context.Context, store datastore.Store) error {
	kdd := store.Type() == datastore.TypeKubernetes
	for attempt := 1; ; attempt++ {
		obj, err := store.Get(ctx, "ClusterInformation", "", "default")
		if errors.Is(err, datastore.ErrNotFound) {
			guid, err := newClusterGUID()
			if err != nil {
				return err
			}
			ready := true
			ci := &api.ClusterInformation{}
			ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
			ci.Spec.ClusterGUID, ci.Spec.DatastoreReady = guid, &ready
			if kdd {
				ci.Spec.ClusterType = "kdd"
			}
			_, err = store.Create(ctx, ci)
			if errors.Is(err, datastore.ErrAlreadyExists) && attempt < casAttempts {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		ci := obj.(*api.ClusterInformation)
		changed := false
		if ci.Spec.ClusterGUID == "" {
			if ci.Spec.ClusterGUID, err = newClusterGUID(); err != nil {
				return err
			}
			changed = true
		}
		if ci.Spec.DatastoreReady == nil {
			ready := true
			ci.Spec.DatastoreReady, changed = &ready, true
		}
		if kdd && !slices.Contains(strings.Split(ci.Spec.ClusterType, ","), "kdd") {
			ci.Spec.ClusterType = strings.TrimPrefix(strings.TrimSuffix(ci.Spec.ClusterType, ",")+",kdd", ",")
			changed = true
		}
		if !changed {
			return nil
		}
		_, err = store.Update(ctx, ci)
		if errors.Is(err, datastore.ErrConflict) && attempt < casAttempts {
			continue
		}
		return err
	}
}

func newClusterGUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate cluster GUID: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// setDatastoreReady writes the lock flag at the revision read, retrying a
// lost race.
func setDatastoreReady(ctx context.Context, store datastore.Store, ready bool) error {
	for attempt := 1; ; attempt++ {
		ci, err := getClusterInfo(ctx, store)
		if err != nil {
			return err
		}
		ci.Spec.DatastoreReady = &ready
		_, err = store.Update(ctx, ci)
		if errors.Is(err, datastore.ErrConflict) && attempt < casAttempts {
			continue
		}
		return err
	}
}

// copyClusterIdentity gives the target the exported cluster's GUID and
// Calico version, as calicoctl's import does, so tools keyed on the GUID
// (ipam check reports) see one cluster.
func copyClusterIdentity(ctx context.Context, store datastore.Store, from *api.ClusterInformation) error {
	for attempt := 1; ; attempt++ {
		ci, err := getClusterInfo(ctx, store)
		if err != nil {
			return err
		}
		if from.Spec.ClusterGUID != "" {
			ci.Spec.ClusterGUID = from.Spec.ClusterGUID
		}
		ci.Spec.CalicoVersion = from.Spec.CalicoVersion
		_, err = store.Update(ctx, ci)
		if errors.Is(err, datastore.ErrConflict) && attempt < casAttempts {
			continue
		}
		return err
	}
}
