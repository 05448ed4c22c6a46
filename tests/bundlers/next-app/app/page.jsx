"use client";
// The Vite example's component, as is (App.jsx is a copy of examples/react-vite/src/App.jsx,
// which the bundler test checks): agentwire needs no next.config.
import App from "./App.jsx";

export default function Page() {
  return <App />;
}
