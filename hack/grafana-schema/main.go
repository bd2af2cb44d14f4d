// Command grafana-schema checks Grafana dashboards (the classic JSON model that Grafana's
// dashboard sidecar and file provisioning load) against Grafana's dashboard schema as the Grafana
// Foundation SDK publishes it: Go types generated from Grafana's schemas, under Apache-2.0
// (Grafana itself is AGPL and not used here). It reads the JSON files named as arguments, or
// stdin with none (or "-"), prints every problem as "FILE: PATH: MESSAGE" and exits 1 if there
// was any (2 if a file could not be read); a dashboard without problems prints "FILE: ok".
//
// What is checked, and why each step is needed:
//
//   - The SDK's strict decoding (Dashboard.UnmarshalJSONStrict): unknown fields refused at every
//     level, required fields present and not null, every value of its schema type. Panel
//     options and fieldConfig.defaults.custom are decoded strictly by the panel type's own
//     schema (timeseries, stat, ...) from the SDK's plugin registry, and queries by their data
//     source's (prometheus, ...).
//   - The SDK's Validate(): the schema's constraints (gridPos within 24 columns, ...).
//   - Enum values: the strict decoding takes any string or number for an enum-typed field, so
//     every value of a closed enum type is checked against the schema's list (enums_gen.go,
//     generated from the SDK's source by gen_enums.go).
//   - What the SDK's strict decoding leaves loose: it decodes a panel's fieldConfig outside
//     `custom` leniently (checked strictly here), and a query without a data source type of its
//     own is decoded as an unchecked bag (decoded here with the panel's data source type; a
//     query no schema covers is a problem). A panel type the SDK does not know is a problem too:
//     its options could not be checked. Panel ids must be unique within the dashboard (the
//     schema says so in words).
//   - The SDK (v0.0.22) reports the strict problems but keeps no decoded panel, panel options
//     or query (its strict decoders return an empty error list as a non-nil error, and the
//     callers drop the value on it), so Validate() and the enum check would never see a panel:
//     the panels are decoded again here (decodePanel), and then checked.
//
// Built by hack/build-grafana-schema.sh; the tests check the operator's dashboard with it
// (crates/e2e/tests/monitoring.rs).
package main

//go:generate go run gen_enums.go

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

const sdkModule = "github.com/grafana/grafana-foundation-sdk/go"

func main() {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == sdkModule && dep.Version != enumsSDKVersion {
				fmt.Fprintf(os.Stderr, "grafana-schema: enums_gen.go was generated from SDK %s but this is built with %s: run go generate in hack/grafana-schema\n", enumsSDKVersion, dep.Version)
				os.Exit(2)
			}
		}
	}
	// Registers the panel types' and data sources' schemas, which the strict decoding of
	// panels and queries looks up by panel type and data source type.
	plugins.RegisterDefaultPlugins()

	files := os.Args[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	status := 0
	for _, name := range files {
		var data []byte
		var err error
		if name == "-" {
			data, err = io.ReadAll(os.Stdin)
			name = "<stdin>"
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "grafana-schema: %v\n", err)
			status = 2
			continue
		}
		problems := check(data)
		for _, p := range problems {
			fmt.Printf("%s: %s\n", name, p)
		}
		if len(problems) == 0 {
			fmt.Printf("%s: ok\n", name)
		} else if status == 0 {
			status = 1
		}
	}
	os.Exit(status)
}

// problems collects messages as "PATH: MESSAGE", once each, in the order found.
type problems struct {
	list []string
	seen map[string]bool
}

func (p *problems) add(path, msg string) {
	path = strings.TrimPrefix(path, ".")
	if path == "" {
		path = "(dashboard)"
	}
	s := path + ": " + msg
	if !p.seen[s] {
		p.seen[s] = true
		p.list = append(p.list, s)
	}
}

// addErr adds an SDK error, one line per problem it holds, under path.
func (p *problems) addErr(path string, err error) {
	if err == nil {
		return
	}
	var errs cog.BuildErrors
	if errors.As(err, &errs) {
		for _, e := range errs {
			p.add(join(path, e.Path), e.Message)
		}
		return
	}
	p.add(path, err.Error())
}

func join(path, sub string) string {
	if path == "" {
		return sub
	}
	if sub == "" {
		return path
	}
	return path + "." + sub
}

// sdkErr is err unless it is an empty cog.BuildErrors: the SDK's UnmarshalJSONStrict methods
// return their error list as an error even when it is empty (a nil slice in a non-nil
// interface), so `err != nil` is always true on them.
func sdkErr(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

func check(data []byte) []string {
	p := &problems{seen: map[string]bool{}}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		p.add("", "not a JSON object: "+err.Error())
		return p.list
	}
	// The SDK's strict decoding finds the problems, but keeps no panel: a panel's strict
	// decoding always returns an error (sdkErr), on which the dashboard's drops the panel; and
	// likewise a panel's options, custom field config and queries. So the panels are decoded
	// again below, for the checks that need them decoded (Validate, enums, ...).
	var d dashboard.Dashboard
	p.addErr("", d.UnmarshalJSONStrict(data))

	var rawPanels []json.RawMessage
	_ = json.Unmarshal(top["panels"], &rawPanels) // a wrong shape was reported above
	d.Panels = nil
	ids := map[uint32]string{}
	for i, raw := range rawPanels {
		path := "panels[" + strconv.Itoa(i) + "]"
		var head struct {
			Type   any               `json:"type"`
			Panels []json.RawMessage `json:"panels"`
		}
		_ = json.Unmarshal(raw, &head)
		if head.Type == "row" {
			row := &dashboard.RowPanel{}
			_ = row.UnmarshalJSONStrict(raw) // its problems were reported above
			uniqueID(p, path, row.Id, ids)
			row.Panels = nil
			for j, rq := range head.Panels {
				row.Panels = append(row.Panels, *decodePanel(p, path+".panels["+strconv.Itoa(j)+"]", rq, ids))
			}
			d.Panels = append(d.Panels, dashboard.PanelOrRowPanel{RowPanel: row})
		} else {
			d.Panels = append(d.Panels, dashboard.PanelOrRowPanel{Panel: decodePanel(p, path, raw, ids)})
		}
	}
	// The schema's constraints, panels included (gridPos, ...); PanelOrRowPanel's Go fields are
	// no JSON fields, so they leave the paths.
	var verrs cog.BuildErrors
	if errors.As(d.Validate(), &verrs) {
		for _, e := range verrs {
			e.Path = strings.ReplaceAll(strings.ReplaceAll(e.Path, ".Panel.", "."), ".RowPanel.", ".")
			p.add(e.Path, e.Message)
		}
	}
	checkEnums(p, "", reflect.ValueOf(d), data)
	return p.list
}

func uniqueID(p *problems, path string, id uint32, ids map[uint32]string) {
	if other, dup := ids[id]; dup {
		p.add(path+".id", fmt.Sprintf("%d is also the id of %s (panel ids must be unique within a dashboard)", id, other))
	} else {
		ids[id] = path
	}
}

// validator is what the SDK's generated types implement.
type validator interface{ Validate() error }

// decodePanel decodes a panel (not a row) whose strict problems the dashboard's strict decoding
// reported, with its options, custom field config and queries as their schemas' Go types, and
// checks what that decoding leaves loose.
func decodePanel(p *problems, path string, raw json.RawMessage, ids map[uint32]string) *dashboard.Panel {
	panel := &dashboard.Panel{}
	_ = panel.UnmarshalJSONStrict(raw) // reported by the dashboard's strict decoding
	var parts struct {
		Options     json.RawMessage   `json:"options"`
		FieldConfig json.RawMessage   `json:"fieldConfig"`
		Targets     []json.RawMessage `json:"targets"`
	}
	_ = json.Unmarshal(raw, &parts)
	if panel.Id != nil {
		uniqueID(p, path, *panel.Id, ids)
	}
	cfg, known := cog.ConfigForPanelcfgVariant(panel.Type)
	if !known && panel.Type != "" {
		p.add(path+".type", fmt.Sprintf("%q is not a panel type of the schema: its options and field config cannot be checked", panel.Type))
	}
	// Options and custom field config: strictly checked by the dashboard's decoding, but
	// dropped; decoded here leniently into the panel type's Go types for Validate and enums.
	if known && len(parts.Options) > 0 && string(parts.Options) != "null" {
		if o, err := cfg.OptionsUnmarshaler(parts.Options); err == nil {
			panel.Options = o
			if v, ok := o.(validator); ok {
				p.addErr(path+".options", v.Validate())
			}
		}
	}
	// The SDK decodes fieldConfig outside `custom` leniently (json.Unmarshal): strictly here.
	if len(parts.FieldConfig) > 0 && string(parts.FieldConfig) != "null" {
		fc := &dashboard.FieldConfigSource{}
		p.addErr(path+".fieldConfig", fc.UnmarshalJSONStrict(parts.FieldConfig))
		var custom struct {
			Defaults struct {
				Custom json.RawMessage `json:"custom"`
			} `json:"defaults"`
		}
		_ = json.Unmarshal(parts.FieldConfig, &custom)
		if known && len(custom.Defaults.Custom) > 0 && string(custom.Defaults.Custom) != "null" {
			if c, err := cfg.FieldConfigUnmarshaler(custom.Defaults.Custom); err == nil {
				fc.Defaults.Custom = c
				if v, ok := c.(validator); ok {
					p.addErr(path+".fieldConfig.defaults.custom", v.Validate())
				}
			}
		}
		panel.FieldConfig = fc
	}
	// Queries: the SDK decodes them before the panel's datasource, so one without a data source
	// type of its own was decoded as an unchecked bag. Each is decoded here by its own data
	// source type, else the panel's; strictly when the dashboard's decoding could not.
	panelType := ""
	if panel.Datasource != nil && panel.Datasource.Type != nil {
		panelType = *panel.Datasource.Type
	}
	panel.Targets = nil
	for i, rq := range parts.Targets {
		qpath := path + ".targets[" + strconv.Itoa(i) + "]"
		var own struct {
			Datasource struct {
				Type string `json:"type"`
			} `json:"datasource"`
		}
		_ = json.Unmarshal(rq, &own)
		hint := own.Datasource.Type
		if hint == "" {
			hint = panelType
			if _, err := cog.StrictUnmarshalDataquery(rq, hint); sdkErr(err) != nil {
				p.addErr(qpath, err)
			}
		}
		q, err := cog.UnmarshalDataquery(rq, hint)
		if err != nil {
			continue // reported by a strict decoding
		}
		if _, unknown := q.(variants.UnknownDataquery); unknown {
			p.add(qpath, fmt.Sprintf("no query schema for data source type %q (neither the query's datasource nor the panel's names one the schema knows)", hint))
			continue
		}
		panel.Targets = append(panel.Targets, q)
	}
	return panel
}

// checkEnums walks a decoded value beside the JSON it was decoded from and reports every value
// of a closed enum type that is not one of the type's values. Only what the JSON holds is
// checked: an absent field's zero value is no value (a missing required one was reported).
func checkEnums(p *problems, path string, v reflect.Value, raw json.RawMessage) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	if allowed, isEnum := enums[v.Type()]; isEnum && v.CanInterface() {
		value := v.Interface()
		names := make([]string, len(allowed))
		for i, a := range allowed {
			if a == value {
				return
			}
			b, _ := json.Marshal(a)
			names[i] = string(b)
		}
		b, _ := json.Marshal(value)
		p.add(path, fmt.Sprintf("%s is not one of %s (%s)", b, strings.Join(names, ", "), v.Type()))
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			checkEnums(p, path, v.Elem(), raw)
		}
	case reflect.Struct:
		t := v.Type()
		if t.Implements(reflect.TypeFor[json.Marshaler]()) {
			// A union (PanelOrRowPanel, BoolOrFloat64, ...): its Go fields are no JSON fields,
			// each holds the whole JSON.
			for i := 0; i < t.NumField(); i++ {
				if t.Field(i).IsExported() {
					checkEnums(p, path, v.Field(i), raw)
				}
			}
			return
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			checkEnums(p, join(path, name), v.Field(i), fields[name])
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return
		}
		for i := 0; i < v.Len() && i < len(items); i++ {
			checkEnums(p, path+"["+strconv.Itoa(i)+"]", v.Index(i), items[i])
		}
	case reflect.Map:
		var items map[string]json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return
		}
		iter := v.MapRange()
		for iter.Next() {
			key := fmt.Sprint(iter.Key().Interface())
			checkEnums(p, join(path, key), iter.Value(), items[key])
		}
	}
}
