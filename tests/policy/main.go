// SPDX-License-Identifier: Apache-2.0

// policy-eval: evaluates deploy/policy's ValidatingAdmissionPolicy offline,
// with cel-go at the version Kubernetes 1.33 vendors and the CEL environment
// options of Kubernetes' base environment that the policy can meet
// (homogeneous aggregate literals, the strings extension at version 0, the
// oldest Kubernetes with ValidatingAdmissionPolicy v1 has).  Not the API
// server: variables are typed dyn here (the API server types them from their
// expressions), and cost limits are not applied.  tests/policy/run feeds it.
//
//	stdin:  {"policy": VAP, "params": ConfigMap|null,
//	         "cases": [{"name", "operation", "namespace", "object", "oldObject"}]}
//	stdout: {"compile": [errors], "results": [{"name", "allowed", "messages", "errors"}]}
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
)

type named struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

type validation struct {
	Expression        string `json:"expression"`
	Message           string `json:"message"`
	MessageExpression string `json:"messageExpression"`
	Reason            string `json:"reason"`
}

type policy struct {
	Spec struct {
		Variables   []named      `json:"variables"`
		Validations []validation `json:"validations"`
	} `json:"spec"`
}

type tcase struct {
	Name      string         `json:"name"`
	Operation string         `json:"operation"`
	Namespace string         `json:"namespace"`
	Object    map[string]any `json:"object"`
	OldObject map[string]any `json:"oldObject"`
}

type input struct {
	Policy policy         `json:"policy"`
	Params map[string]any `json:"params"`
	Cases  []tcase        `json:"cases"`
}

type result struct {
	Name     string   `json:"name"`
	Allowed  bool     `json:"allowed"`
	Messages []string `json:"messages"`
	Errors   []string `json:"errors"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "policy-eval:", err)
		os.Exit(2)
	}
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(ext.StringsVersion(0)),
		cel.Variable("object", cel.DynType),
		cel.Variable("oldObject", cel.DynType),
		cel.Variable("params", cel.DynType),
		cel.Variable("request", cel.DynType),
		cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "policy-eval:", err)
		os.Exit(2)
	}
	var compileErrs []string
	compile := func(what, expr string, wantString bool) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			compileErrs = append(compileErrs, what+": "+iss.Err().Error())
			return nil
		}
		if wantString && ast.OutputType() != cel.StringType && ast.OutputType() != cel.DynType {
			compileErrs = append(compileErrs, what+": messageExpression is "+ast.OutputType().String())
		}
		if !wantString && strings.HasPrefix(what, "validation") && ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
			compileErrs = append(compileErrs, what+": expression is "+ast.OutputType().String())
		}
		prg, err := env.Program(ast)
		if err != nil {
			compileErrs = append(compileErrs, what+": "+err.Error())
			return nil
		}
		return prg
	}
	vars := make([]cel.Program, len(in.Policy.Spec.Variables))
	for i, v := range in.Policy.Spec.Variables {
		vars[i] = compile("variable "+v.Name, v.Expression, false)
	}
	checks := make([]cel.Program, len(in.Policy.Spec.Validations))
	msgs := make([]cel.Program, len(in.Policy.Spec.Validations))
	for i, v := range in.Policy.Spec.Validations {
		checks[i] = compile(fmt.Sprintf("validation %d", i), v.Expression, false)
		if v.MessageExpression != "" {
			msgs[i] = compile(fmt.Sprintf("validation %d messageExpression", i), v.MessageExpression, true)
		}
	}
	out := struct {
		Compile []string `json:"compile"`
		Results []result `json:"results"`
	}{Compile: compileErrs}
	if len(compileErrs) == 0 {
		for _, c := range in.Cases {
			out.Results = append(out.Results, run(in, c, vars, checks, msgs))
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func run(in input, c tcase, vars, checks, msgs []cel.Program) result {
	r := result{Name: c.Name, Allowed: true, Messages: []string{}, Errors: []string{}}
	variables := map[string]any{}
	var params any
	if in.Params != nil {
		params = in.Params
	}
	var old any
	if c.OldObject != nil {
		old = c.OldObject
	}
	act := map[string]any{
		"object":    c.Object,
		"oldObject": old,
		"params":    params,
		"request": map[string]any{
			"operation": c.Operation,
			"namespace": c.Namespace,
			"name":      "",
		},
		"namespaceObject": nil,
		"variables":       variables,
	}
	for i, v := range in.Policy.Spec.Variables {
		val, _, err := vars[i].Eval(act)
		if err != nil {
			r.Errors = append(r.Errors, "variable "+v.Name+": "+err.Error())
			r.Allowed = false
			return r
		}
		variables[v.Name] = val
	}
	for i, v := range in.Policy.Spec.Validations {
		val, _, err := checks[i].Eval(act)
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("validation %d: %v", i, err))
			r.Allowed = false
			continue
		}
		if val == types.True {
			continue
		}
		r.Allowed = false
		msg := v.Message
		if msgs[i] != nil {
			m, _, err := msgs[i].Eval(act)
			if err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("validation %d messageExpression: %v", i, err))
			} else if s, ok := m.Value().(string); ok {
				msg = s
			}
		}
		r.Messages = append(r.Messages, v.Reason+": "+msg)
	}
	return r
}
