package config

import (
	"errors"
	"fmt"
	"os"

	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Load reads and parses the configuration file at path; see Parse.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(src, path)
}

// Parse decodes src, the contents of the file named filename, applies the
// defaults and validates the result. Errors name file:line:column; several
// are joined with errors.Join. Relative paths in src are made absolute
// against filename's directory.
func Parse(src []byte, filename string) (*Config, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, &Error{File: filename, Msg: "not an HCL native-syntax file"}
	}
	d := &decoder{Decoder: conf.NewDecoder(filename), src: src, file: filename}
	c := d.decodeFile(body)
	if len(d.Errs) > 0 {
		return nil, errors.Join(d.Errs...)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// decoder walks one parsed file: conf's decoder, plus the source, from
// which plugin blocks' bodies are cut.
type decoder struct {
	*conf.Decoder
	src  []byte
	file string
}

func (d *decoder) decodeFile(body *hclsyntax.Body) *Config {
	c := &Config{
		File: d.file,
		loc:  map[string]hcl.Range{"": {Filename: d.file, Start: hcl.InitialPos, End: hcl.InitialPos}},
	}
	// The top level's defaults (strict = true) hold for a file that does
	// not set them, as a block's do for a block left out.
	topTable.Defaults(c)
	for _, b := range blocks {
		if b.preset != nil {
			b.preset(c) // a block left out still has its defaults
		}
	}
	content, diags := conf.Content(body, rootSchema())
	d.Diags(diags)
	conf.DecodeContent(d.Decoder, topTable, content, c, conf.Place{Loc: c.loc})

	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		for _, bl := range blocks {
			if bl.header.Type != b.Type {
				continue
			}
			if len(bl.header.LabelNames) == 0 {
				if first, dup := seen[b.Type]; dup {
					d.Fail(b.DefRange, b.Type, "a second %s block; the first is at %s: merge them into one", b.Type, conf.PosString(first))
					break
				}
				seen[b.Type] = b.DefRange
			}
			bl.decode(d, c, b)
		}
	}
	if c.Metastore.Kind == MetastoreEmbedded && c.Metastore.Listen == "" && !c.has("metastore.listen") {
		c.Metastore.Listen = DefaultMetastoreListen
	}
	return c
}

// pluginBody cuts a decoded plugin or device block's config block out of
// the source for the plugin, and returns p with it.
func (d *decoder) pluginBody(b *hcl.Block, kind string, p Plugin) Plugin {
	field := kind + "." + p.Name
	// The config block's text is cut from the source between its braces,
	// which only the native-syntax block records.
	var blocks []*hclsyntax.Block
	if sb, ok := b.Body.(*hclsyntax.Body); ok {
		blocks = sb.Blocks
	}
	var first *hclsyntax.Block
	for _, cb := range blocks {
		if cb.Type != "config" || len(cb.Labels) != 0 {
			continue // unknown blocks and labels: Content has reported them
		}
		if first != nil {
			d.Fail(cb.DefRange(), field+".config", "a second config block; the first is at %s: merge them into one", conf.PosString(first.DefRange()))
			continue
		}
		first = cb
		start, end := cb.OpenBraceRange.End, cb.CloseBraceRange.Start
		if start.Byte < 0 || start.Byte > end.Byte || end.Byte > len(d.src) {
			d.Fail(cb.DefRange(), field+".config", "cannot locate the block's body in the source")
			continue
		}
		p.Body = append([]byte{}, d.src[start.Byte:end.Byte]...)
		p.BodyFile = d.file
		p.BodyLine, p.BodyColumn, p.BodyByte = start.Line, start.Column, start.Byte
	}
	return p
}

func diagError(diags hcl.Diagnostics) error {
	return errors.Join(conf.DiagErrors(diags, "")...)
}

func (c *Config) has(field string) bool {
	_, ok := c.loc[field]
	return ok
}
