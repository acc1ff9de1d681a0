// Command gitops-drift asks the GitOps tools' own drift detection what it makes of the objects of a
// manifest in a live cluster, for gpuguard's e2e tests (tests/e2e/test_gitops_e2e.py), and prints
// the answer as one JSON document on stdout.
//
// Flux: github.com/fluxcd/pkg/ssa, called as kustomize-controller calls it (field manager
// "kustomize-controller", owner labels, the same apply options): `flux-apply` is one reconcile
// (ResourceManager.ApplyAll: a server-side apply dry run per object, compared with the live object,
// and a real apply only of what drifted), `flux-diff` is ResourceManager.Diff with the options of
// `flux diff kustomization`.
//
// Argo CD: github.com/argoproj/gitops-engine, called as the application controller calls it
// (manager "argocd-controller", the cluster's OpenAPI GVK parser, no ignoreDifferences):
// `argo-apply` is a sync (client-side `kubectl apply` code, or server-side with
// --server-side-apply), `argo-legacy-diff` the default diff (three-way against the last-applied
// annotation), `argo-ssd-diff` Server-Side Diff (a server-side apply dry run through the webhooks;
// --include-mutation-webhook=false is Argo CD's default, true is the compare option
// IncludeMutationWebhook=true).
//
// Every decision ("drifted") is the library's; the "differences" listed beside it only explain it
// (paths where the live object and the object the library predicts differ).  Warnings the
// apiserver returned to the tool's requests (gpuguard's included) are collected.  Exit status 0
// whatever the verdict, 2 on an error (said on stderr).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/argoproj/gitops-engine/pkg/diff"
	"github.com/argoproj/gitops-engine/pkg/utils/kube"
	"github.com/argoproj/gitops-engine/pkg/utils/tracing"
	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	fluxManager  = "kustomize-controller"        // kustomize-controller's field manager (its controller name)
	fluxGroup    = "kustomize.toolkit.fluxcd.io" // the owner labels' prefix
	argoManager  = "argocd-controller"           // Argo CD's common.ArgoCDSSAManager
	fluxLibrary  = "github.com/fluxcd/pkg/ssa"
	argoLibrary  = "github.com/argoproj/gitops-engine"
	requestLimit = 60 * time.Second
)

type difference struct {
	Path      string `json:"path"`
	Live      any    `json:"live,omitempty"`      // absent: the live object has no such field
	Predicted any    `json:"predicted,omitempty"` // absent: the predicted object has none
}

type objectResult struct {
	Object      string       `json:"object"`           // Kind/namespace/name
	Action      string       `json:"action,omitempty"` // Flux's change set action, Argo CD's kubectl output
	Drifted     bool         `json:"drifted"`
	Differences []difference `json:"differences"`
}

type result struct {
	Mode     string         `json:"mode"`
	Library  string         `json:"library"` // module path and version linked in
	User     string         `json:"user"`    // who the requests impersonated ("" = the kubeconfig's identity)
	Drifted  bool           `json:"drifted"` // any object drifted (or, for an apply, was written)
	Objects  []objectResult `json:"objects"`
	Warnings []string       `json:"warnings"` // the apiserver's warnings to these requests, in order
}

// warningCollector keeps every Warning header the apiserver sends to any client of this process.
type warningCollector struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningCollector) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningCollector) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string{}, w.seen...)
}

type options struct {
	mode, kubeconfig, as, filename, kustomization string
	includeMutationWebhook, serverSideApply       bool
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "", "flux-apply | flux-diff | argo-apply | argo-legacy-diff | argo-ssd-diff")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	flag.StringVar(&o.as, "as", "", "user to impersonate, as kubectl --as (the identity the tool would act as)")
	flag.StringVar(&o.filename, "f", "", "manifest (YAML, multi-document) the tool reads from Git")
	flag.StringVar(&o.kustomization, "kustomization", "flux-system/gpu-workloads",
		"NAMESPACE/NAME of the Flux Kustomization (its owner labels)")
	flag.BoolVar(&o.includeMutationWebhook, "include-mutation-webhook", true,
		"argo-ssd-diff: Argo CD's compare option IncludeMutationWebhook=true (false: Argo CD's default)")
	flag.BoolVar(&o.serverSideApply, "server-side-apply", false, "argo-apply: the sync option ServerSideApply=true")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "gitops-drift: %v\n", err)
		os.Exit(2)
	}
}

func run(o options) error {
	if o.kubeconfig == "" || o.filename == "" {
		return errors.New("--kubeconfig and -f are required")
	}
	warnings := &warningCollector{}
	rest.SetDefaultWarningHandler(warnings) // also reaches the clients kubectl's factory builds
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.Impersonate.UserName = o.as
	cfg.WarningHandler = warnings // controller-runtime would otherwise install its own logger
	cfg.Timeout = requestLimit
	manifest, err := os.ReadFile(o.filename)
	if err != nil {
		return err
	}
	objects, err := ssautils.ReadObjects(bytes.NewReader(manifest))
	if err != nil {
		return fmt.Errorf("reading %s: %w", o.filename, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*requestLimit)
	defer cancel()

	res := result{Mode: o.mode, User: o.as, Objects: []objectResult{}}
	switch o.mode {
	case "flux-apply", "flux-diff":
		res.Library = linked(fluxLibrary)
		err = runFlux(ctx, o, cfg, objects, &res)
	case "argo-apply", "argo-legacy-diff", "argo-ssd-diff":
		res.Library = linked(argoLibrary)
		err = runArgo(ctx, o, cfg, objects, &res)
	default:
		err = fmt.Errorf("unknown --mode %q", o.mode)
	}
	if err != nil {
		return err
	}
	for _, obj := range res.Objects {
		res.Drifted = res.Drifted || obj.Drifted
	}
	res.Warnings = warnings.all()
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	return out.Encode(res)
}

// linked names the version of a module this binary was built with.
func linked(module string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == module {
				return dep.Path + " " + dep.Version
			}
		}
	}
	return module
}

func subject(obj *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
}

// ---------------------------------------------------------------------------------------- Flux

func runFlux(ctx context.Context, o options, cfg *rest.Config, objects []*unstructured.Unstructured,
	res *result) error {
	kubeClient, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	poller := polling.NewStatusPoller(kubeClient, kubeClient.RESTMapper(), polling.Options{})
	manager := ssa.NewResourceManager(kubeClient, poller, ssa.Owner{Field: fluxManager, Group: fluxGroup})
	ksNamespace, ksName, found := strings.Cut(o.kustomization, "/")
	if !found {
		return fmt.Errorf("--kustomization %q is not NAMESPACE/NAME", o.kustomization)
	}
	// What kustomize-controller does to the objects it built before applying them.
	manager.SetOwnerLabels(objects, ksName, ksNamespace)
	if err := normalize.UnstructuredList(objects); err != nil {
		return err
	}
	if o.mode == "flux-apply" {
		changeSet, err := manager.ApplyAll(ctx, objects, fluxApplyOptions())
		if err != nil {
			return err
		}
		for _, entry := range changeSet.Entries {
			res.Objects = append(res.Objects, objectResult{
				Object: entry.Subject, Action: string(entry.Action), Differences: []difference{},
				Drifted: entry.Action != ssa.UnchangedAction && entry.Action != ssa.SkippedAction,
			})
		}
		return nil
	}
	// The flux CLI's (v2.6, internal/build/diff.go: `flux diff kustomization`).
	diffOptions := ssa.DiffOptions{
		Exclusions:           map[string]string{fluxGroup + "/reconcile": "disabled", fluxGroup + "/ssa": "ignore"},
		IfNotPresentSelector: map[string]string{fluxGroup + "/ssa": "ifnotpresent"},
	}
	for _, obj := range objects {
		entry, live, predicted, err := manager.Diff(ctx, obj, diffOptions)
		if err != nil {
			return err
		}
		r := objectResult{Object: subject(obj), Action: string(entry.Action), Differences: []difference{},
			Drifted: entry.Action != ssa.UnchangedAction && entry.Action != ssa.SkippedAction}
		if live != nil && predicted != nil {
			compare("", fluxView(live), fluxView(predicted), &r.Differences)
		}
		res.Objects = append(res.Objects, r)
	}
	return nil
}

// fluxApplyOptions are kustomize-controller's (v1.6, internal/controller/kustomization_controller.go):
// no force, its selectors, and the cleanup of what kubectl applied before Flux took over.
func fluxApplyOptions() ssa.ApplyOptions {
	opts := ssa.DefaultApplyOptions()
	opts.ExclusionSelector = map[string]string{fluxGroup + "/reconcile": "disabled", fluxGroup + "/ssa": "Ignore"}
	opts.IfNotPresentSelector = map[string]string{fluxGroup + "/ssa": "IfNotPresent"}
	opts.ForceSelector = map[string]string{fluxGroup + "/force": "enabled"}
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation, fluxGroup + "/checksum", "fluxcd.io/sync-checksum"},
		Labels:      []string{"fluxcd.io/sync-gc-mark"},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: fluxManager, OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{fluxGroup + "/ssa": "Merge"},
	}
	return opts
}

// fluxView is what ResourceManager's drift check compares: labels, annotations, and the object
// without metadata and status, normalized as the dry-run result is.
func fluxView(obj *unstructured.Unstructured) map[string]any {
	body := obj.DeepCopy()
	unstructured.RemoveNestedField(body.Object, "metadata")
	unstructured.RemoveNestedField(body.Object, "status")
	_ = normalize.DryRunUnstructured(body)
	view := body.Object
	view["metadata"] = map[string]any{"labels": toAny(obj.GetLabels()), "annotations": toAny(obj.GetAnnotations())}
	return view
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------------------------------- Argo CD

func runArgo(ctx context.Context, o options, cfg *rest.Config, objects []*unstructured.Unstructured,
	res *result) error {
	log := textlogger.NewLogger(textlogger.NewConfig())
	kubectl := &kube.KubectlCmd{Log: log, Tracer: tracing.NopTracer{}}
	// The application controller's cluster cache loads these once per cluster.
	openAPISchema, gvkParser, err := kubectl.LoadOpenAPISchema(cfg)
	if err != nil {
		return err
	}
	if o.mode == "argo-apply" {
		ops, cleanup, err := kubectl.ManageResources(cfg, openAPISchema)
		if err != nil {
			return err
		}
		defer cleanup()
		for _, obj := range objects {
			out, err := ops.ApplyResource(ctx, obj, cmdutil.DryRunNone, false, true, o.serverSideApply, argoManager)
			if err != nil {
				return fmt.Errorf("applying %s: %w", subject(obj), err)
			}
			written := !strings.HasSuffix(strings.TrimSpace(out), "unchanged") // kubectl's "… unchanged"
			res.Objects = append(res.Objects, objectResult{Object: subject(obj), Action: out, Drifted: written,
				Differences: []difference{}})
		}
		return nil
	}
	kubeClient, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ssd := o.mode == "argo-ssd-diff"
	diffOptions := []diff.Option{
		// Argo CD's util/argo/diff.StateDiffs, with no ignoreDifferences and no resource overrides.
		diff.WithNormalizer(diff.GetNoopNormalizer()),
		diff.IgnoreAggregatedRoles(false),
		diff.WithStructuredMergeDiff(false),
		diff.WithGVKParser(gvkParser),
		diff.WithManager(argoManager),
		diff.WithServerSideDiff(ssd),
		diff.WithLogr(log),
	}
	if ssd {
		applier, cleanup, err := kube.ManageServerSideDiffDryRuns(cfg, openAPISchema, tracing.NopTracer{}, log, nil)
		if err != nil {
			return err
		}
		defer cleanup()
		diffOptions = append(diffOptions, diff.WithServerSideDryRunner(diff.NewK8sServerSideDryRunner(applier)),
			diff.WithIgnoreMutationWebhook(!o.includeMutationWebhook))
	}
	for _, obj := range objects {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		if err := kubeClient.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			live = nil
		}
		verdict, err := diff.Diff(obj, live, diffOptions...)
		if err != nil {
			return fmt.Errorf("diffing %s: %w", subject(obj), err)
		}
		r := objectResult{Object: subject(obj), Drifted: verdict.Modified, Differences: []difference{}}
		var normalizedLive, predictedLive any
		if json.Unmarshal(verdict.NormalizedLive, &normalizedLive) == nil &&
			json.Unmarshal(verdict.PredictedLive, &predictedLive) == nil {
			compare("", normalizedLive, predictedLive, &r.Differences)
		}
		res.Objects = append(res.Objects, r)
	}
	return nil
}

// ---------------------------------------------------------------------------------------- differences

// compare lists where live and predicted differ: maps key by key, lists of equal length item by item,
// anything else (a list that changed length included) whole.
func compare(path string, live, predicted any, out *[]difference) {
	switch l := live.(type) {
	case map[string]any:
		if p, ok := predicted.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range l {
				keys[k] = true
			}
			for k := range p {
				keys[k] = true
			}
			sorted := make([]string, 0, len(keys))
			for k := range keys {
				sorted = append(sorted, k)
			}
			sort.Strings(sorted)
			for _, k := range sorted {
				compare(join(path, k), l[k], p[k], out)
			}
			return
		}
	case []any:
		if p, ok := predicted.([]any); ok && len(p) == len(l) {
			for i := range l {
				compare(fmt.Sprintf("%s[%d]", path, i), l[i], p[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(normalizeNumber(live), normalizeNumber(predicted)) {
		*out = append(*out, difference{Path: path, Live: live, Predicted: predicted})
	}
}

func join(path, key string) string {
	if strings.ContainsAny(key, "./") {
		key = fmt.Sprintf("[%q]", key)
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// normalizeNumber lets an int64 from a typed conversion equal the float64 of a JSON decode.
func normalizeNumber(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case int32:
		return float64(n)
	}
	return v
}
