// A grpc-js-xds client for the interop tests (run by node as a subprocess).
//
// Usage: node grpc_js_xds_peer.js TARGET SECONDS   (needs GRPC_XDS_BOOTSTRAP
// and NODE_PATH pointing at a node_modules with @grpc/grpc-js and -xds).
// Calls /interop.Echo/Who until SECONDS pass; prints the answering backend's
// name, or "error <code>", one line per call.
'use strict';
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');

xds.register();
const [target, seconds] = process.argv.slice(2);
const client = new grpc.Client(target, grpc.credentials.createInsecure());
const end = Date.now() + Number(seconds) * 1000;
const identity = (x) => x;

function call() {
  if (Date.now() > end) {
    client.close();
    process.exit(0);
  }
  client.makeUnaryRequest(
    '/interop.Echo/Who', identity, identity, Buffer.alloc(0),
    { deadline: Date.now() + 2000 },
    (err, value) => {
      console.log(err ? `error ${err.code}` : value.toString());
      setTimeout(call, 50);
    });
}

call();
