// `node --import ./testing/register.js …`: runs a plugin's module under plain Node.js, with the
// host's `cordon:tool/…` imports served by the stand-ins in `host/`, so tools can be tested
// natively (fast, with Node's debugger) before they are built into a component.
import { register } from 'node:module';

register('./hooks.js', import.meta.url);
