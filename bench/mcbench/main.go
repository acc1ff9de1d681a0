// Command mcbench times kube-apiserver's own matchConditions evaluation (the code path
// k8s.io/apiserver runs for a webhook, conversions included) for conditions and objects
// read from files, so a condition's cost is measured in microseconds without a cluster.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/scheme"
)

type input struct {
	Conditions []admissionregv1.MatchCondition `json:"conditions"`
	Object     json.RawMessage                 `json:"object"`
	Resource   string                          `json:"resource"`
	Group      string                          `json:"group"`
	Version    string                          `json:"version"`
	Username   string                          `json:"username"`
	Operation  string                          `json:"operation"`
}

func die(err error) {
	fmt.Fprintln(os.Stderr, "mcbench:", err)
	os.Exit(2)
}

// typed decodes built-in kinds into their Go types, as the apiserver holds them; others stay unstructured.
func typed(raw []byte) (runtime.Object, schema.GroupVersionKind) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		die(err)
	}
	gvk := u.GroupVersionKind()
	if obj, err := scheme.Scheme.New(gvk); err == nil {
		if err := json.Unmarshal(raw, obj); err != nil {
			die(err)
		}
		return obj, gvk
	}
	return u, gvk
}

func main() {
	var in input
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		die(err)
	}
	if err := json.Unmarshal(data, &in); err != nil {
		die(err)
	}
	obj, gvk := typed(in.Object)
	exprs := make([]celplugin.ExpressionAccessor, len(in.Conditions))
	for i, c := range in.Conditions {
		exprs[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	compiler := celplugin.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
	evaluator := compiler.CompileCondition(exprs, celplugin.OptionalVariableDeclarations{HasAuthorizer: true, StrictCost: true},
		environment.StoredExpressions)
	for _, e := range evaluator.CompilationErrors() {
		die(e)
	}
	fail := admissionregv1.Fail
	matcher := matchconditions.NewMatcher(evaluator, &fail, "webhook", "admit", "bench")
	gvr := schema.GroupVersionResource{Group: in.Group, Version: in.Version, Resource: in.Resource}
	attr := admission.NewAttributesRecord(obj, nil, gvk, "bench", "bench", gvr, "", admission.Operation(in.Operation),
		nil, false, &user.DefaultInfo{Name: in.Username})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj}
	ctx := context.Background()
	first := matcher.Match(ctx, va, nil, nil)
	if first.Error != nil {
		die(first.Error)
	}
	result := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			matcher.Match(ctx, va, nil, nil)
		}
	})
	out, _ := json.Marshal(map[string]any{"matches": first.Matches, "ns_per_op": result.NsPerOp(),
		"allocs_per_op": result.AllocsPerOp(), "n": result.N})
	fmt.Println(string(out))
}
