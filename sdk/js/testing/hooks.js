// Resolves `cordon:tool/<interface>@<version>` to the stand-in `host/<interface>.js`.
export async function resolve(specifier, context, next) {
  if (specifier.startsWith('cordon:tool/')) {
    const iface = specifier.slice('cordon:tool/'.length).split('@')[0];
    return { url: new URL(`./host/${iface}.js`, import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
