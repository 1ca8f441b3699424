/**
 * Certificates for tests of TLS to Redis and PostgreSQL, made with `openssl`: a certificate
 * authority of the test's own and a server certificate it signed for the names the test gives
 * (`localhost` and `127.0.0.1` unless told), and a second authority that signed nothing the
 * servers present, for the tests that must see a certificate refused. P-256 keys, valid for two
 * days: quick to make, and accepted by every TLS stack the tests meet.
 *
 * @module
 */

/** The files {@linkcode makeTestCa} wrote. */
export interface TestCa {
  /** The authority's certificate (PEM): what a client trusts. */
  readonly caFile: string;
  /** The server's certificate (PEM), signed by the authority. */
  readonly certFile: string;
  /** The server's private key (PEM). */
  readonly keyFile: string;
  /** Another authority's certificate, which signed neither. */
  readonly otherCaFile: string;
}

/** Options of {@linkcode makeTestCa}. */
export interface MakeTestCaOptions {
  /** The server certificate's subject alternative names. @default ["DNS:localhost", "IP:127.0.0.1"] */
  readonly names?: readonly string[];
}

async function openssl(dir: string, ...args: string[]): Promise<void> {
  const { code, stderr } = await new Deno.Command("openssl", {
    args,
    cwd: dir,
    stdout: "null",
    stderr: "piped",
  }).output();
  if (code !== 0) {
    throw new Error(
      `Cannot run openssl ${args[0]} as it exited ${code}: ${new TextDecoder().decode(stderr)}`,
    );
  }
}

const KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/** Writes a CA, a server certificate it signed, and another CA into `dir` (which must exist). */
export async function makeTestCa(dir: string, options: MakeTestCaOptions = {}): Promise<TestCa> {
  const names = options.names ?? ["DNS:localhost", "IP:127.0.0.1"];
  for (const ca of ["ca", "other-ca"]) {
    await openssl(
      dir,
      "req",
      "-x509",
      ...KEY,
      "-keyout",
      `${ca}.key`,
      "-out",
      `${ca}.pem`,
      "-days",
      "2",
      "-subj",
      `/CN=users-pipeline test ${ca}`,
    );
  }
  await openssl(
    dir,
    "req",
    ...KEY,
    "-keyout",
    "server.key",
    "-out",
    "server.csr",
    "-subj",
    "/CN=server",
  );
  await Deno.writeTextFile(`${dir}/server.ext`, `subjectAltName=${names.join(",")}\n`);
  await openssl(
    dir,
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.pem",
    "-days",
    "2",
    "-extfile",
    "server.ext",
  );
  return {
    caFile: `${dir}/ca.pem`,
    certFile: `${dir}/server.pem`,
    keyFile: `${dir}/server.key`,
    otherCaFile: `${dir}/other-ca.pem`,
  };
}
