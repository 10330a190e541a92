// Where the functions' code comes from: built from the workspace by cargo-lambda (the
// default), or a release's prebuilt zips (`-c lambdaZips=DIR`), which need no Rust
// toolchain. Either way the same runtime, handler and architecture.
import * as fs from 'fs';
import * as path from 'path';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { RustFunction } from 'cargo-lambda-cdk';
import { Construct } from 'constructs';

export const FUNCTIONS = ['interruption', 'schedule', 'cluster-events'] as const;

const WORKSPACE = path.resolve(__dirname, '..', '..', '..', 'Cargo.toml');

/** A release zip's name (scripts/release): ballast-VERSION-lambda-FUNCTION-arm64.zip. */
const RELEASE_ZIP = /^ballast-(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?)-lambda-(.+)-arm64\.zip$/;

/**
 * The zip of each function in `dir` (relative to where `cdk` runs, infra/cdk), all of one
 * release: a missing, duplicated or mixed-version zip is refused before synth, not
 * deployed.
 */
export function releaseZips(dir: string): Record<string, string> {
  const root = path.resolve(dir);
  let names: string[];
  try {
    names = fs.readdirSync(root);
  } catch (e) {
    throw new Error(`lambdaZips ${JSON.stringify(dir)}: not a readable directory (${(e as Error).message})`);
  }
  const found = new Map<string, string[]>();
  const versions = new Set<string>();
  for (const name of names) {
    const m = RELEASE_ZIP.exec(name);
    if (!m || !(FUNCTIONS as readonly string[]).includes(m[2])) continue;
    versions.add(m[1]);
    found.set(m[2], [...(found.get(m[2]) ?? []), name]);
  }
  const wanted = FUNCTIONS.map((f) => `ballast-VERSION-lambda-${f}-arm64.zip`).join(', ');
  const missing = FUNCTIONS.filter((f) => !found.has(f));
  if (missing.length) {
    throw new Error(`lambdaZips ${root}: no zip for ${missing.join(', ')} (a release's ${wanted})`);
  }
  if (versions.size > 1) {
    throw new Error(`lambdaZips ${root}: zips of several releases (${[...versions].sort().join(', ')}); keep one release's ${wanted}`);
  }
  const zips: Record<string, string> = {};
  for (const f of FUNCTIONS) {
    const file = path.join(root, found.get(f)![0]);
    if (!fs.statSync(file).isFile()) throw new Error(`lambdaZips: ${file} is not a file`);
    zips[f] = file;
  }
  return zips;
}

/** The function `binary`: from its release zip when `zip` is given, else built by cargo-lambda. */
export function rustFunction(scope: Construct, id: string, binary: string, props: lambda.FunctionOptions, zip?: string): lambda.Function {
  if (zip === undefined) {
    return new RustFunction(scope, id, { ...props, manifestPath: WORKSPACE, binaryName: binary, architecture: lambda.Architecture.ARM_64 });
  }
  // A .zip asset is uploaded as it is (no re-zipping): `bootstrap` at its root, as
  // cargo-lambda's, for the same runtime and handler RustFunction sets.
  return new lambda.Function(scope, id, {
    ...props,
    runtime: lambda.Runtime.PROVIDED_AL2023,
    handler: 'bootstrap',
    architecture: lambda.Architecture.ARM_64,
    code: lambda.Code.fromAsset(zip),
  });
}
