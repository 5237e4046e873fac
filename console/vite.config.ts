// Vite builds the console into dist/, which sonde embeds and serves at `/` (assets under
// /assets/). In development (`npm run dev`) Vite serves the pages and forwards /api to a running
// sonde: SONDE_URL, default http://127.0.0.1:3000.
import { defineConfig } from 'vite';

const sonde = process.env.SONDE_URL ?? 'http://127.0.0.1:3000';

export default defineConfig({
  base: '/',
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    emptyOutDir: true,
    target: 'es2022',
    // One small bundle; sourcemaps stay out of the binary.
    sourcemap: false,
    // Nothing inlined as data: URLs into scripts (the CSP allows data: only for images).
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
  server: {
    proxy: {
      // sonde refuses a cookie-carrying POST/DELETE whose Origin is not its own host. In
      // development the page's origin is Vite's, so the forwarded request gets sonde's Host
      // (changeOrigin) and no Origin header. Development only: the built console is same-origin.
      '/api': {
        target: sonde,
        changeOrigin: true,
        configure: (proxy) => proxy.on('proxyReq', (req) => req.removeHeader('origin')),
      },
    },
  },
});
