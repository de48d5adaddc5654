// The component's module: componentize-js builds it (see package.json's `build`).
import { plugin } from './tools.js';

export const { tools, toolOutputs } = plugin.exports();
