// The npm package gpt-tokenizer's r50k_base (GPT-2's encoding) on one file, timed as bpe_speed.cpp
// times xgrad:   node bpe_node.js NODE_MODULES TEXT_FILE [REPEATS]
'use strict';
const fs = require('fs');
const path = require('path');

const [modules, file, repeatsArg = '5'] = process.argv.slice(2);
const repeats = Number(repeatsArg);
const text = new TextDecoder('utf-8').decode(fs.readFileSync(file));
const mb = Buffer.byteLength(fs.readFileSync(file)) / 1e6;
const seconds = (start) => Number(process.hrtime.bigint() - start) / 1e9;

let start = process.hrtime.bigint();
const { encode } = require(path.join(path.resolve(modules), 'gpt-tokenizer', 'cjs', 'encoding', 'r50k_base.js'));
const load = seconds(start);
start = process.hrtime.bigint();
let tokens = encode(text).length;
const first = seconds(start);
let best = Infinity;
for (let r = 0; r < repeats; ++r) {
  start = process.hrtime.bigint();
  tokens = encode(text).length;
  best = Math.min(best, seconds(start));
}
console.log(`node    load ${load.toFixed(3)} s  first ${first.toFixed(3)} s (${(mb / first).toFixed(1)} MB/s)  ` +
            `best of ${repeats} ${best.toFixed(3)} s (${(mb / best).toFixed(1)} MB/s)  ${tokens} tokens`);
