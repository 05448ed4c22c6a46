"use client";
// The Vite example's component, as is (App.jsx links to examples/react-vite/src/App.jsx; the
// test copies it in): agentwire needs no next.config.
import App from "./App.jsx";

export default function Page() {
  return <App />;
}
